"""A per-op record with its place in a simulated schedule: what the discrete-event engine
(:func:`simulator.engines.discrete_event.simulate`) returns per op, and what the Chrome trace writer
(:mod:`simulator.report.trace`) lays out on its tracks."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.report.report import OpCost

__all__ = ["ScheduledOpCost"]


@dataclass(frozen=True)
class ScheduledOpCost(OpCost):
    """An :class:`~simulator.report.OpCost` with its place in the simulated schedule (seconds from 0).

    ``time_s`` is the op's scheduled duration, ``end_s - start_s``: its standalone time stretched
    by whatever it shared the device with. ``compute_s``, ``memory_s``, ``overhead_s`` and
    ``bound`` stay those of the op alone.

    Attributes
    ----------
    ready_s
        When all of the op's predecessors had completed.
    launch_start_s, launch_end_s
        The host's launch slot for the op (``launch_end_s - launch_start_s`` is ``kernels x`` the
        per-kernel launch overhead); both equal ``start_s`` for ops launched with another (fused)
        or not launched at all (views).
    start_s, end_s
        When the op ran on its track: from its first SM slot to its completion.
    track
        ``"stream N"``, ``"link"``, or ``""`` for ops that take no resource (views, no-ops).
    standalone_s
        The op's time alone on the device (the analytical engine's ``time_s``).
    priority
        The op's stream priority (lower is more urgent; 0 by default).
    """

    ready_s: float = 0.0
    launch_start_s: float = 0.0
    launch_end_s: float = 0.0
    start_s: float = 0.0
    end_s: float = 0.0
    track: str = ""
    standalone_s: float = 0.0
    priority: int = 0

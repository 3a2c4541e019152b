"""Discrete-event simulation of a pipeline schedule: each device runs its own ordered list of forward
and backward passes as a SimPy process, a pass starting only when its inputs have arrived.

Order per device (Narayanan et al. 2021, Sec. 2.2; Megatron-LM ``schedules.py`` follows the same
orders):

* ``gpipe``: every forward, then every backward (in reverse microbatch order, as autograd runs them);
* ``1f1b``: ``p - s - 1`` warm-up forwards on stage ``s``, then one forward / one backward
  alternately, then the remaining backwards;
* ``interleaved``: with ``v`` chunks per device, forward ``k`` of the device's ``m v`` forwards
  runs chunk ``(k // p) mod v`` of microbatch ``(k // (p v)) p + k mod p``; stage ``s`` warms up
  with ``(p - s - 1) 2 + (v - 1) p`` forwards, then alternates; backwards visit chunks in
  reverse.

Dependencies: the forward of chunk ``c`` of microbatch ``i`` needs the forward of chunk ``c - 1``
(on the previous device, ``link_s`` later); its backward needs the backward of chunk ``c + 1`` and
its own forward. Stage times come from the analytical engine (one microbatch per chunk); the
simulation supplies what the closed form (:func:`simulator.parallel.schedule.pipeline_time`)
approximates when stages differ: the exact waiting. With equal stages and no link latency the two
agree exactly (a test enforces it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import simpy

__all__ = ["PipelineTrace", "simulate_pipeline", "device_order"]


@dataclass(frozen=True)
class PipelineTrace:
    """Simulated step: its time and, per device, the (kind, microbatch, chunk, start_s, end_s) passes."""

    step_s: float
    passes: tuple[tuple[tuple[str, int, int, float, float], ...], ...]

    def busy_s(self, device: int) -> float:
        return sum(e - s for _, _, _, s, e in self.passes[device])

    @property
    def bubble_s(self) -> float:
        """Idle time of the busiest device."""
        return self.step_s - max(self.busy_s(d) for d in range(len(self.passes)))


def device_order(schedule: str, p: int, m: int, s: int, v: int = 1) -> list[tuple[str, int, int]]:
    """The ordered (``"F"``/``"B"``, microbatch, virtual chunk on this device) passes of stage ``s``."""
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]
    if schedule == "1f1b":
        warm = min(p - s - 1, m)
        order: list[tuple[str, int, int]] = [("F", i, 0) for i in range(warm)]
        f, b = warm, 0
        while f < m:
            order.append(("F", f, 0))
            f += 1
            order.append(("B", b, 0))
            b += 1
        order += [("B", i, 0) for i in range(b, m)]
        return order
    if schedule == "interleaved":
        if m % p:
            raise ValueError(f"interleaved schedule: microbatches {m} not a multiple of pp {p}; expected a multiple "
                             "(as Megatron-LM requires)")
        total = m * v

        def fwd(k: int) -> tuple[str, int, int]:
            return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

        def bwd(k: int) -> tuple[str, int, int]:
            return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

        warm = min((p - s - 1) * 2 + (v - 1) * p, total)
        order = [fwd(k) for k in range(warm)]
        fk, bk = warm, 0
        while fk < total:
            order.append(fwd(fk))
            fk += 1
            order.append(bwd(bk))
            bk += 1
        order += [bwd(k) for k in range(bk, total)]
        return order
    raise ValueError(f"schedule: got {schedule!r}; expected gpipe, 1f1b or interleaved")


def simulate_pipeline(fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]], m: int,
                      schedule: str = "1f1b", link_s: float = 0.0) -> PipelineTrace:
    """Simulate one step of ``m`` microbatches.

    Parameters
    ----------
    fwd_s, bwd_s
        ``fwd_s[s][c]``: forward time of one microbatch through chunk ``c`` of device ``s`` (one chunk
        per device unless interleaved); the same shape for backward.
    m
        Microbatches.
    schedule
        ``gpipe``, ``1f1b`` or ``interleaved``.
    link_s
        Time for an activation (or its gradient) to reach the neighbouring device, beyond what the
        stage times already include.
    """
    p = len(fwd_s)
    v = len(fwd_s[0]) if p else 0
    if p == 0 or any(len(x) != v for x in (*fwd_s, *bwd_s)) or len(bwd_s) != p:
        raise ValueError("pipeline: expected equal-shaped forward and backward times, one row per device")
    env = simpy.Environment()
    chunks = p * v
    # global chunk index of device s's local chunk c: c * p + s
    done = {(kind, i, g): env.event() for kind in "FB" for i in range(m) for g in range(chunks)}
    passes: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(p)]

    def device(s: int):  # noqa: ANN202 - a SimPy process
        for kind, i, c in device_order(schedule, p, m, s, v):
            g = c * p + s
            if kind == "F":
                if g > 0:
                    yield done[("F", i, g - 1)]
            else:
                yield done[("F", i, g)]
                if g < chunks - 1:
                    yield done[("B", i, g + 1)]
            start = env.now
            yield env.timeout(fwd_s[s][c] if kind == "F" else bwd_s[s][c])
            passes[s].append((kind, i, c, start, env.now))
            ev = done[(kind, i, g)]
            if link_s > 0 and ((kind == "F" and g < chunks - 1) or (kind == "B" and g > 0)):
                env.process(_deliver(env, ev, link_s))
            else:
                ev.succeed()

    for s in range(p):
        env.process(device(s))
    env.run()
    unfinished = [k for k, ev in done.items() if not ev.triggered]
    if unfinished:  # a schedule that cannot finish is a bug in the order, never a silent result
        raise RuntimeError(f"pipeline: {len(unfinished)} passes never ran (first: {unfinished[0]}); the "
                           f"{schedule} order deadlocked")
    return PipelineTrace(float(env.now), tuple(tuple(x) for x in passes))


def _deliver(env: simpy.Environment, ev: simpy.Event, delay: float):  # noqa: ANN202 - a SimPy process
    yield env.timeout(delay)
    ev.succeed()

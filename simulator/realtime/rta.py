"""Worst-case response-time bounds: fixed-priority response-time analysis with non-preemptive kernels,
release jitter, arbitrary deadlines, and holistic jitter propagation along data-driven edges.

Each device schedules its tasks by fixed priority and preempts only at kernel boundaries. For task
``i`` with worst-case work ``C_i`` (the largest job over its input distribution's support), period (or
minimum inter-arrival) ``T_i`` and release jitter ``J_i``, the level-i busy period is examined job by
job (Lehoczky's arbitrary-deadline analysis, with Tindell's jitter terms):

    w_i(q) = B_i + (q + 1) C_i + sum_{j in hep(i)} ceil((w_i(q) + J_j) / T_j) C_j

iterated to its least fixed point, for every job q = 0 .. Q-1 of the level-i busy period (its length
``L = B_i + sum_{j in hep(i) + i} ceil((L + J_j) / T_j) C_j``, ``Q = ceil((L + J_i) / T_i)``).
``B_i`` is the longest kernel of a lower-priority task on the device (a kernel in flight when i is
released runs to completion); ``hep(i)`` are the other tasks of the device with a priority at least
i's (equal priorities are counted as interference, which is sound for any tie-break). The bound from
the job's release is ``max(w_i(0), max_{q>=1} w_i(q) - q T_i + J_i)``; from its nominal release
(the "arrival") it is ``max_q w_i(q) - q T_i + J_i``. The analysis examines the whole busy period,
which keeps it sound for deferred preemption, where the first job is not always the worst (Bril,
Lukkien and Verhaegh, Real-Time Systems 42, 2009). A level-i utilisation of 1 or more has no
bound (``inf``).

A data-driven task is released when its trigger finishes: its period is its source's and its
release jitter the spread of the trigger's completion times after the source's arrival (earliest:
the trigger's earliest release plus its smallest work; latest: its latest release plus its bound).
Jitters and bounds are iterated together until they no longer change (Tindell and Clark's holistic
analysis, Microprocessing and Microprogramming 40, 1994).

End-to-end chain bound: ``L_0`` is the first task's bound; along a data-driven edge (the successor's
trigger is the predecessor) ``L_k = L_{k-1} + R_k``; along a sampling edge (the successor reads the
predecessor's latest output) ``L_k = L_{k-1} + G_{k-1} + R_k``, where ``G`` bounds the gap between
consecutive outputs of the predecessor (its longest inter-release time plus its bound minus its
smallest work). All bounds are conditional on the quantile named in the report when a variable's
distribution is unbounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from simulator.realtime.costing import TaskCost
from simulator.realtime.scenario import Scenario

__all__ = ["TaskBound", "ChainBound", "Analysis", "analyse", "response_time", "MAX_HOLISTIC_ROUNDS",
           "ROUNDING_MARGIN"]

#: Relative widening of every bound: the simulator adds the same kernel times in another order, and
#: float sums that differ in their last bits must not put a simulated maximum above its bound.
ROUNDING_MARGIN = 1e-9
#: Rounds of jitter propagation before a non-converging system is declared unbounded.
MAX_HOLISTIC_ROUNDS = 200
#: A level busy period longer than this many of the task's periods is taken as unbounded (a sound,
#: pessimistic answer that keeps the analysis fast near full utilisation).
_MAX_BUSY_PERIODS = 10_000


@dataclass(frozen=True)
class TaskBound:
    """Bounds of one task (s; ``inf`` when none exists)."""

    name: str
    device: str
    priority: int
    wcet_s: float
    bcet_s: float
    period_s: float
    jitter_s: float
    blocking_s: float
    response_bound_s: float  # from the job's release
    arrival_bound_s: float  # from the job's nominal release
    jobs_in_busy_period: int


@dataclass(frozen=True)
class ChainBound:
    name: str
    bound_s: float


@dataclass(frozen=True)
class Analysis:
    """The result of :func:`analyse`: per-task and per-chain bounds, analytic utilisation per device."""

    tasks: dict[str, TaskBound]
    chains: dict[str, ChainBound]
    utilisation: dict[str, float]
    exact: bool  # False: some variable is unbounded; the bounds hold up to the quantile
    notes: tuple[str, ...]


def response_time(c: float, t: float, j: float, b: float, hep: list[tuple[float, float, float]]) -> tuple[float, float, int]:
    """Bounds of one task from its busy period.

    Parameters
    ----------
    c, t, j
        Worst-case work, period (minimum inter-arrival) and release jitter of the task (s).
    b
        Blocking: the longest lower-priority kernel (s).
    hep
        ``(C_j, T_j, J_j)`` of every other task of at least its priority on its device.

    Returns
    -------
    (from release, from nominal release, jobs examined)
        ``(inf, inf, q)`` when the level's utilisation is 1 or more or the busy period does not end.

    Examples
    --------
    Two tasks, the hand case of ``docs/realtime.md``: C = 2, T = 5 above C = 3, T = 10, no blocking:

    >>> response_time(3.0, 10.0, 0.0, 0.0, [(2.0, 5.0, 0.0)])[0]
    5.0
    """
    util = c / t + sum(cj / tj for cj, tj, _ in hep)
    if util >= 1.0 or not all(math.isfinite(x) for x in (c, j, b, *(v for h in hep for v in h))):
        return math.inf, math.inf, 0
    # the level-i busy period: the least L = B + sum over i and hep(i) of ceil((L + J) / T) C
    everyone = [(c, t, j), *hep]
    busy = b + sum(cj for cj, _, _ in everyone)
    while True:
        nxt = b + sum(math.ceil((busy + jj) / tj) * cj for cj, tj, jj in everyone)
        if nxt <= busy:
            break
        busy = nxt
        if busy > _MAX_BUSY_PERIODS * t:
            return math.inf, math.inf, 0
    jobs = max(1, math.ceil((busy + j) / t))
    r_rel = r_arr = 0.0
    w = 0.0
    for q in range(jobs):
        # w(q) >= w(q-1) + C: start there (the iteration climbs to the least fixed point from below)
        w = max(w + c, b + (q + 1) * c + sum(cj for cj, _, _ in hep))
        while True:
            nxt = b + (q + 1) * c + sum(math.ceil((w + jj) / tj) * cj for cj, tj, jj in hep)
            if nxt <= w:
                break
            w = nxt
        r_arr = max(r_arr, w - q * t + j)
        r_rel = max(r_rel, w if q == 0 else w - q * t + j)
    return r_rel, r_arr, jobs


def _period(scn: Scenario, name: str) -> float:
    t = scn.task(name)
    while not t.is_source:
        t = scn.task(t.trigger)
    return float(t.period_s)


def _release_gap(scn: Scenario, name: str, bounds: Mapping[str, TaskBound]) -> float:
    """Longest time between two consecutive releases of ``name`` (s)."""
    t = scn.task(name)
    if t.activation == "periodic":
        return float(t.period_s) + t.jitter_s
    if t.activation == "sporadic":
        return float(t.max_interarrival_s) + t.jitter_s
    return _output_gap(scn, t.trigger, bounds)


def _output_gap(scn: Scenario, name: str, bounds: Mapping[str, TaskBound]) -> float:
    """Longest time between two consecutive completions of ``name`` (s)."""
    b = bounds[name]
    return _release_gap(scn, name, bounds) + b.response_bound_s - b.bcet_s


def _topological(scn: Scenario) -> list[str]:
    """Task names with every predecessor before its successors (file order among ready tasks)."""
    done: list[str] = []
    left = [t.name for t in scn.tasks]
    while left:
        for n in left:
            if all(a in done for a in scn.task(n).after):
                done.append(n)
                left.remove(n)
                break
    return done


def analyse(scn: Scenario, costs: Mapping[str, TaskCost]) -> Analysis:
    """Response-time bounds of every task and chain of ``scn`` with its kernels ``costs``."""
    names = [t.name for t in scn.tasks]
    period = {n: _period(scn, n) for n in names}
    own_jitter = {t.name: (t.jitter_s if t.is_source else 0.0) for t in scn.tasks}
    jitter = dict(own_jitter)
    earliest: dict[str, float] = {}  # earliest release after the source's arrival
    by_dev: dict[str, list[str]] = {}
    for n in names:
        by_dev.setdefault(costs[n].device, []).append(n)
    order = _topological(scn)
    for n in order:  # earliest release after the source's arrival: fixed by the smallest works
        t = scn.task(n)
        earliest[n] = 0.0 if t.is_source else earliest[t.trigger] + costs[t.trigger].bcet_s
    notes: list[str] = []
    bounds: dict[str, TaskBound] = {}
    for _ in range(MAX_HOLISTIC_ROUNDS):
        bounds = {}
        for n in names:
            t = scn.task(n)
            dev = costs[n].device
            others = [m for m in by_dev[dev] if m != n]
            hep = [(costs[m].wcet_s, period[m], jitter[m]) for m in others if scn.task(m).priority >= t.priority]
            blocking = max((costs[m].longest_kernel_s for m in others if scn.task(m).priority < t.priority), default=0.0)
            r_rel, r_arr, q = response_time(costs[n].wcet_s, period[n], jitter[n], blocking, hep)
            r_rel, r_arr = r_rel * (1 + ROUNDING_MARGIN), r_arr * (1 + ROUNDING_MARGIN)
            bounds[n] = TaskBound(n, dev, t.priority, costs[n].wcet_s, costs[n].bcet_s, period[n], jitter[n], blocking,
                                  r_rel, r_arr, q)
        new_jitter = dict(own_jitter)
        for n in order:
            t = scn.task(n)
            if not t.is_source:  # released when the trigger finishes: latest minus earliest completion
                latest = earliest[t.trigger] + bounds[t.trigger].arrival_bound_s
                new_jitter[n] = latest - earliest[n] if math.isfinite(latest) else math.inf
        if all(new_jitter[n] == jitter[n] for n in names):
            break
        jitter = new_jitter
    else:
        notes.append(f"jitter propagation did not settle in {MAX_HOLISTIC_ROUNDS} rounds: bounds taken as unbounded")
        bounds = {n: TaskBound(**{**b.__dict__, "response_bound_s": math.inf, "arrival_bound_s": math.inf})
                  for n, b in bounds.items()}

    chains: dict[str, ChainBound] = {}
    for c in scn.chains:
        total = bounds[c.tasks[0]].response_bound_s
        for a, b in zip(c.tasks, c.tasks[1:], strict=False):
            stage = bounds[b].response_bound_s
            if scn.task(b).trigger == a:
                total += stage
            else:
                total += _output_gap(scn, a, bounds) + stage
        chains[c.name] = ChainBound(c.name, total)

    util: dict[str, float] = {}
    for d in sorted(by_dev):
        util[d] = sum(costs[n].wcet_s / period[n] for n in by_dev[d])
    exact = all(c.exact_bound for c in costs.values())
    return Analysis(bounds, chains, util, exact, tuple(notes))

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

Transfers and shared memory. A job's input transfers are leading kernels of the job (see
:mod:`.costing`), so ``C_i`` and the blocking terms include them. On devices that share one DRAM
(a :class:`~.costing.MemoryPool`), a kernel's work part slows down while kernels of other devices of
the pool move DRAM bytes at the same time; the simulator divides the bandwidth max-min fairly
(:class:`~.costing.PoolSharing`). Two sound bounds are computed and each task keeps the smaller:

1. *Kernel by kernel.* Every kernel is inflated to its time at the worst speed it can get: its
   max-min fair share beside, on every other device of the pool that hosts a task, the largest
   demand any kernel of that device has. That is sound because a max-min fair allocation never rises
   when another kernel asks for more (water filling: the level falls), and at any instant each other
   device runs one kernel, at most that demand, or nothing. In particular a kernel gets at least
   ``min(demand, bandwidth / m)`` with ``m`` devices contending, so its work part takes at most
   ``max(work, m x bytes / bandwidth)``. Fixed parts are never slowed. ``C_i`` and ``B_i`` use the
   inflated kernels.
2. *Busy window.* Standalone ``C`` and ``B``, plus the time the device can lose in the window: while
   it runs continuously through a window of length ``w`` it does at least ``w - (1 - s) O(w)``
   seconds of standalone work, ``s`` the slowest of its kernels' worst speeds (above) and ``O(w)``
   the time any other device of the pool is busy in the window, at most ``min(w, sum_j busy_j(w))``
   with ``busy_j(w) = min(w, sum_{k on j} ceil((w + J_k + R_k) / T_k) C_k)`` (every job of ``k``
   that can overlap the window, carry-in included, at its kernel-by-kernel work and bound). So
   ``(1 - s) O(w)`` is added to every fixed point (the supply-bound form of the same analysis). It is
   much tighter when the other devices are rarely busy (a CPU task beside a GPU stack).

The smallest work (earliest completions) keeps the standalone times, which is sound since contention
only slows. The utilisation at worst-case work is the smaller of ``sum C_i / T_i`` with inflated
kernels and the standalone one plus the long-run rate of the losses.

End-to-end chain bound: ``L_0`` is the first task's bound; along a data-driven edge (the successor's
trigger is the predecessor) ``L_k = L_{k-1} + R_k``; along a sampling edge (the successor reads the
predecessor's latest output) ``L_k = L_{k-1} + G_{k-1} + R_k``, where ``G`` bounds the gap between
consecutive outputs of the predecessor (its longest inter-release time plus its bound minus its
smallest work). All bounds are conditional on the quantile named in the report when a variable's
distribution is unbounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from simulator.realtime.costing import MemoryPool, PoolSharing, TaskCost, Variant
from simulator.realtime.scenario import Scenario

__all__ = ["TaskBound", "ChainBound", "Analysis", "analyse", "response_time", "contended_work",
           "MAX_HOLISTIC_ROUNDS", "ROUNDING_MARGIN"]

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
    transfer_s: float = 0.0  # worst-case input transfers inside wcet_s (standalone)
    contention_s: float = 0.0  # what shared-DRAM contention adds to wcet_s at worst


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
    pools: tuple[MemoryPool, ...] = ()


def response_time(c: float, t: float, j: float, b: float, hep: list[tuple[float, float, float]],
                  extra: Callable[[float], float] | None = None, extra_rate: float = 0.0) -> tuple[float, float, int]:
    """Bounds of one task from its busy period.

    Parameters
    ----------
    c, t, j
        Worst-case work, period (minimum inter-arrival) and release jitter of the task (s).
    b
        Blocking: the longest lower-priority kernel (s).
    hep
        ``(C_j, T_j, J_j)`` of every other task of at least its priority on its device.
    extra
        Time the device may lose in a window of ``w`` seconds on top of its work (a non-decreasing
        function of ``w``; shared-DRAM slowdown), added to every fixed point; ``extra_rate`` bounds
        ``extra(w) / w`` in the long run (the level's utilisation plus it must stay below 1).

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
    util = c / t + sum(cj / tj for cj, tj, _ in hep) + extra_rate
    if util >= 1.0 or not all(math.isfinite(x) for x in (c, j, b, *(v for h in hep for v in h))):
        return math.inf, math.inf, 0
    lost = extra or (lambda w: 0.0)
    # the level-i busy period: the least L = B + sum over i and hep(i) of ceil((L + J) / T) C
    everyone = [(c, t, j), *hep]
    busy = b + sum(cj for cj, _, _ in everyone)
    while True:
        nxt = b + sum(math.ceil((busy + jj) / tj) * cj for cj, tj, jj in everyone) + lost(busy)
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
            nxt = b + (q + 1) * c + sum(math.ceil((w + jj) / tj) * cj for cj, tj, jj in hep) + lost(w)
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


def contended_work(costs: Mapping[str, TaskCost], pools: tuple[MemoryPool, ...] | list[MemoryPool] = ()
                   ) -> dict[str, tuple[float, float]]:
    """(worst-case job work, longest kernel) of every task with each kernel at its worst speed under
    shared-DRAM contention (s; see the module docstring). Tasks outside any pool, or alone in theirs,
    keep their standalone figures.

    Examples
    --------
    Two devices of a 100 GB/s pool, each with one 1 ms kernel that alone moves 100 GB/s: each kernel
    can be slowed to half speed, 2 ms.

    >>> from simulator.realtime.costing import MemoryPool, TaskCost, Variant
    >>> from simulator.realtime.scenario import scenario_from_dict
    >>> scn = scenario_from_dict({"tasks": [{"name": n, "model": "copy:bytes=64", "device": n, "rate": "10 Hz",
    ...                                      "deadline": "50 ms"} for n in ("a", "b")]})
    >>> v = Variant.of([1e-3], [0.0], [1e8])
    >>> costs = {t.name: TaskCost(t, t.name, {(): v}, {}, True) for t in scn.tasks}
    >>> contended_work(costs, [MemoryPool("p", ("a", "b"), 100e9)])["a"]
    (0.002, 0.002)
    """
    return {n: (w, lk) for n, (w, lk, _) in _contention(costs, pools).items()}


def _contention(costs: Mapping[str, TaskCost], pools: tuple[MemoryPool, ...] | list[MemoryPool]
                ) -> dict[str, tuple[float, float, float]]:
    """(worst-case job work, longest kernel, slowest speed of any of its kernels) per task."""
    out = {n: (c.wcet_s, c.longest_kernel_s, 1.0) for n, c in costs.items()}
    for pool in pools:
        sharing = PoolSharing(pool)
        peak: dict[str, float] = {}
        for c in costs.values():
            if c.device in pool.devices:
                peak[c.device] = max(peak.get(c.device, 0.0), c.peak_rate)
        for n, c in costs.items():
            others = tuple(r for d, r in sorted(peak.items()) if d != c.device and r > 0)
            if c.device not in pool.devices or not others:
                continue
            memo: dict[float, float] = {}
            own = [_slowed(v, sharing, others, memo) for v in c.variants.values()]
            wcet = max(w for w, _ in own)
            longest = max(lk for _, lk in own)
            for x in c.inputs:
                xs = [_slowed(v, sharing, others, memo) for v in (x.variant(b) for b in x.support_bytes) if v is not None]
                if xs:
                    wcet += max(w for w, _ in xs)
                    longest = max(longest, max(lk for _, lk in xs))
            out[n] = (max(wcet, c.wcet_s), max(longest, c.longest_kernel_s), min(memo.values(), default=1.0))
    return out


def _slowed(v: Variant, sharing: PoolSharing, others: tuple[float, ...], memo: dict[float, float]
            ) -> tuple[float, float]:
    """(total, longest kernel) of ``v`` with every work part at its worst speed beside demands ``others``."""
    total = longest = 0.0
    for k, seg in enumerate(v.segments):
        r = v.rate(k)
        if r > 0:
            speed = memo.get(r)
            if speed is None:
                speed = memo[r] = sharing.speeds((r, *others))[0]
            f = v.fixed_s(k)
            seg = f + (seg - f) / speed
        total += seg
        longest = max(longest, seg)
    return total, longest


def analyse(scn: Scenario, costs: Mapping[str, TaskCost], pools: tuple[MemoryPool, ...] | list[MemoryPool] = ()
            ) -> Analysis:
    """Response-time bounds of every task and chain of ``scn`` with its kernels ``costs``, with shared-DRAM
    contention among the devices of each of ``pools`` (none: devices run independently).

    With contention, two sound analyses are run and each task keeps the smaller bound: every kernel at
    its worst speed (``C``, ``B`` inflated), and the busy-window analysis of the module docstring
    (standalone ``C`` and ``B`` plus the time the other devices of the pool can be busy in the window,
    at the device's slowest speed), whose other-device workloads use the first analysis' bounds.
    """
    pools = tuple(pools)
    names = [t.name for t in scn.tasks]
    worst = _contention(costs, pools)
    wcet = {n: worst[n][0] for n in names}
    longest = {n: worst[n][1] for n in names}
    period = {n: _period(scn, n) for n in names}
    by_dev: dict[str, list[str]] = {}
    for n in names:
        by_dev.setdefault(costs[n].device, []).append(n)
    bounds, notes = _holistic(scn, costs, period, by_dev, wcet, longest, {})
    util: dict[str, float] = {d: sum(wcet[n] / period[n] for n in by_dev[d]) for d in sorted(by_dev)}
    if any(wcet[n] > costs[n].wcet_s for n in names):
        extra = _busy_window_losses(costs, pools, by_dev, worst, bounds)
        alone = {n: costs[n].wcet_s for n in names}
        refined, notes_b = _holistic(scn, costs, period, by_dev, alone, {n: costs[n].longest_kernel_s for n in names},
                                     extra)
        merged = {}
        for n in names:
            a, b = bounds[n], refined[n]
            merged[n] = replace(a, response_bound_s=min(a.response_bound_s, b.response_bound_s),
                                arrival_bound_s=min(a.arrival_bound_s, b.arrival_bound_s))
        bounds = merged
        notes = [x for x in notes if x in notes_b]  # a bound is unbounded only if both analyses say so
        for d in util:  # the long-run share of the smaller of the two: standalone work plus its losses
            util[d] = min(util[d], sum(alone[n] / period[n] for n in by_dev[d]) + extra.get(d, (None, 0.0))[1])

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

    exact = all(c.exact_bound for c in costs.values())
    return Analysis(bounds, chains, util, exact, tuple(notes), pools)


def _busy_window_losses(costs: Mapping[str, TaskCost], pools: tuple[MemoryPool, ...], by_dev: Mapping[str, list[str]],
                        worst: Mapping[str, tuple[float, float, float]], first: Mapping[str, TaskBound]
                        ) -> dict[str, tuple[Callable[[float], float], float]]:
    """Per device of a pool: (the time it can lose in a window of ``w`` s, its long-run rate).

    A device running continuously through a window of length ``w`` loses at most ``(1 - s) O(w)`` of it,
    ``s`` its slowest kernel speed and ``O(w) <= min(w, sum_j busy_j(w))`` the time other devices ``j``
    of the pool are busy in the window: each task ``k`` of ``j`` runs at most ``ceil((w + J_k + R_k) /
    T_k)`` jobs there (carry-in included), each for at most its inflated work (``first``'s bounds).
    """
    out: dict[str, tuple[Callable[[float], float], float]] = {}
    for pool in pools:
        for d in pool.devices:
            if d not in by_dev:
                continue
            slow = min(worst[n][2] for n in by_dev[d])
            if slow >= 1.0:
                continue
            loads = []  # per other device: (C, T, J + R) of its tasks
            for j in pool.devices:
                if j == d or j not in by_dev:
                    continue
                loads.append([(worst[k][0], first[k].period_s, first[k].jitter_s + first[k].response_bound_s)
                              for k in by_dev[j]])
            if not loads:
                continue
            rate = min(1.0, sum(min(1.0, sum(c / t for c, t, _ in ld)) for ld in loads))

            def lost(w: float, loads: list[list[tuple[float, float, float]]] = loads, slow: float = slow) -> float:
                busy = 0.0
                for ld in loads:
                    if any(not math.isfinite(h) for _, _, h in ld):
                        busy += w
                    else:
                        busy += min(w, sum(math.ceil((w + h) / t) * c for c, t, h in ld))
                return (1.0 - slow) * min(w, busy)

            out[d] = (lost, (1.0 - slow) * rate)
    return out


def _holistic(scn: Scenario, costs: Mapping[str, TaskCost], period: Mapping[str, float],
              by_dev: Mapping[str, list[str]], wcet: Mapping[str, float], longest: Mapping[str, float],
              extra: Mapping[str, tuple[Callable[[float], float], float]]) -> tuple[dict[str, TaskBound], list[str]]:
    """Per-task bounds with jitters propagated along data-driven edges to a fixed point."""
    names = [t.name for t in scn.tasks]
    own_jitter = {t.name: (t.jitter_s if t.is_source else 0.0) for t in scn.tasks}
    jitter = dict(own_jitter)
    earliest: dict[str, float] = {}  # earliest release after the source's arrival
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
            hep = [(wcet[m], period[m], jitter[m]) for m in others if scn.task(m).priority >= t.priority]
            blocking = max((longest[m] for m in others if scn.task(m).priority < t.priority), default=0.0)
            lost, lost_rate = extra.get(dev, (None, 0.0))
            r_rel, r_arr, q = response_time(wcet[n], period[n], jitter[n], blocking, hep, lost, lost_rate)
            r_rel, r_arr = r_rel * (1 + ROUNDING_MARGIN), r_arr * (1 + ROUNDING_MARGIN)
            bounds[n] = TaskBound(n, dev, t.priority, wcet[n], costs[n].bcet_s, period[n], jitter[n], blocking,
                                  r_rel, r_arr, q, costs[n].transfer_s, wcet[n] - costs[n].wcet_s)
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
    return bounds, notes

"""The discrete-event engine: ``simulate(graph, system, options)`` schedules per-op costs on SimPy resources.

The analytical engine (:func:`simulator.engines.analytical.evaluate`) costs every op and adds the times up on
one stream. This engine takes the same per-op costs (it calls ``evaluate`` and schedules its
records, so both engines share one costing path) and composes them as a SimPy simulation:

* the **host** is one resource that launches kernels in program order without waiting for the
  device (asynchronous launches, as PyTorch eager does). Launching an op of ``k`` kernels holds
  the host for ``k x`` the per-kernel launch overhead of the spec
  (``efficiency.launch_overhead_s``, or ``efficiency.graph_launch_overhead_s`` with
  ``EvalOptions.cuda_graphs``), the same floor ``evaluate`` applies. An op may start once its
  launch has been issued, i.e. at the start of its launch slot: the launch overhead is the
  interval between consecutive launches, and the op's record time already includes the
  per-kernel floor (kernel start/finish cost), so on one stream the host never delays a kernel
  and the makespan equals ``evaluate``'s sum, while on several streams the launch rate caps how
  much small kernels can overlap (a chain or a fan of ``n`` tiny kernels takes ``n`` launch
  overheads either way);
* each op is a SimPy process that waits for its predecessors' completion events and its launch,
  then requests a **stream** of the device (a ``simpy.PriorityResource`` of capacity
  ``streams``; waiting ops are served by priority, then in program order) and submits its kernel
  to the **device**;
* the device is a fluid model of the hardware shared by the kernels running at once
  (:mod:`simulator.engines.contention`): each kernel's record is split into a fixed part and a
  work part; SM slots go to kernels by the CTAs their grids place (occupancy; a grid that fills
  the device leaves nothing to others until its last wave), higher stream priority first when
  slots free up, never taken from a running kernel (preemption only at kernel boundaries); DRAM
  and L2 bandwidth and the power budget ``tdp_w - idle_w`` (with ``EvalOptions.power_cap``) are
  shared in proportion to demand (processor sharing, max-min fair). Rates change at every start,
  phase end and finish, and progress is integrated exactly between events. A kernel alone runs
  at its standalone speed, so on one stream the makespan equals ``evaluate``'s sum; two
  memory-bound kernels at once take about twice as long as one; a compute-bound and a
  memory-bound kernel that fit on the SMs together overlap;
* collectives (``all_reduce``, ``all_gather``, ...) run on a separate **link** resource
  (capacity one: one communicator, whose collectives NCCL serialises), so communication
  overlaps compute; their use of SMs and DRAM is not modelled;
* ops that relabel memory (views) and zero-time ops without kernels take no resource and finish
  as soon as their inputs are ready; elementwise ops fused into a producer (``EvalOptions.fusion``)
  run on the producer's stream right after it, inside the same launch.

Stream priorities: ``simulate(..., priorities={"group or op name": p})`` gives the ops of a group
(or one op) priority ``p`` (lower is more urgent, as CUDA stream priorities). Host-to-device copies
would run on the copy engines over the host link (supported by the sharing model); the operator
IR has no copy kind, so graphs have none today.

Energy is each op's dynamic energy (from the records: contention stretches time, not work) plus
the device's idle power over the makespan. The idle energy of every instant is shared equally
among the ops running then (an instant with none running is charged to the next op that
starts), so per-op energies still sum to the total. Each record's ``time_s`` is the op's
scheduled duration (``end_s - start_s``); ``standalone_s`` is its time alone. The model and its
assumptions are described in ``docs/des.md``.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass, fields, replace
from itertools import pairwise
from typing import Any

import simpy

from hwmodels.spec import DeviceSpec, SystemSpec
from simulator.engines.analytical import (
    EvalOptions,
    evaluate,
    host_floor_s,
    launch_floor_s,
    module_call_counts,
    module_host_s,
    spec_of,
)
from simulator.engines.contention import DeviceCapacity, FluidDevice, KernelDemand
from simulator.lowering import COLLECTIVE_KINDS  # run on the link resource instead of a stream
from simulator.report import CostReport, OpCost
from simulator.report.scheduled import ScheduledOpCost
from workloads.ir import Op, OpGraph

__all__ = ["simulate", "ScheduledOpCost", "ENGINE_NAME", "COLLECTIVE_KINDS", "LINK_TRACK", "stream_track"]

logger = logging.getLogger(__name__)

ENGINE_NAME = "des"
#: Track name of the link resource.
LINK_TRACK = "link"
# Relative slack when comparing summed powers with the TDP (float rounding only).
_REL_EPS = 1e-9


def stream_track(index: int) -> str:
    """Track name of compute stream ``index`` (``"stream 0"``, ``"stream 1"``...)."""
    return f"stream {index}"


@dataclass
class _Unit:
    """What holds a resource once: a kernel op and the ops fused into it, or a collective."""

    index: int  # program index of the head op
    members: list[int]
    link: bool
    launch_s: float  # host time to launch it (0: not launched by the host)
    launched: bool
    deps: list[int]  # indices (into the unit list) of the units it waits for, ascending
    priority: int = 0
    ready_s: float = 0.0
    launch_start_s: float = 0.0
    launch_end_s: float = 0.0
    start_s: float = 0.0
    track: str = ""
    done: bool = False


def simulate(graph: OpGraph, system: DeviceSpec | SystemSpec, options: EvalOptions | None = None, *,
             streams: int = 1, priorities: Mapping[str, int] | None = None, trace: bool = False) -> CostReport:
    """Simulate ``graph`` on ``system`` event by event: dependencies, launches, streams, device sharing, links.

    Parameters
    ----------
    graph
        The workload (any :class:`~workloads.ir.OpGraph`).
    system
        A device, or a system whose device runs the graph (collectives use its fabric).
    options
        :class:`~simulator.engines.analytical.EvalOptions`, as for :func:`~simulator.engines.analytical.evaluate`;
        ``power_cap`` also caps concurrent kernels together at the TDP.
    streams
        Compute streams of the device: how many kernels may run at once (1: in-order execution).
    priorities
        Stream priority by op group or op name: an op takes the value of its own name, else of the
        longest key that is its group or a ``/``-separated prefix of it (0 when none). Lower is
        more urgent (CUDA convention). Waiting ops get free streams and free SM slots in priority
        order; running kernels are never interrupted.
    trace
        Log every scheduling event (launch, start, end) at DEBUG level through this module's logger.

    Returns
    -------
    CostReport
        The same contract as ``evaluate``: records in program order (each a
        :class:`ScheduledOpCost` carrying its start and end times in s), totals whose
        ``latency_s`` is the makespan, memory check, warnings, and provenance with
        ``engine = "des"``, ``streams`` and the contention statistics. Deterministic: the same
        inputs give byte-identical ``to_json()``.

    Raises
    ------
    ValueError
        ``streams`` is not a positive integer, or ``priorities`` names no op or group of the
        graph or gives a value that is not an integer.

    Examples
    --------
    >>> from hwmodels.catalog import load_device
    >>> from workloads.zoo import build_model
    >>> import math
    >>> g, h100 = build_model("inception_v3"), load_device("h100-sxm5-80gb")
    >>> one = simulate(g, h100).latency_s  # one stream: the analytical sum, up to the order of additions
    >>> simulate(g, h100, streams=2).latency_s <= one and math.isclose(one, evaluate(g, h100).latency_s, rel_tol=1e-12)
    True
    """
    opts, prio = _checked_options(graph, streams, options, priorities)
    base = evaluate(graph, system, opts)
    dev = spec_of(system)[0]
    floor = launch_floor_s(dev, opts)
    records = base.records
    if len(records) != len(graph.ops) or any(r.name != op.name for r, op in zip(records, graph.ops, strict=True)):
        raise RuntimeError(f"simulate: graph {graph.name!r}: the analytical records do not follow the graph's "
                           "program order; expected one record per op, in order")
    calls = module_call_counts(graph) if (opts.eager_framework and opts.eager_modules) else {}
    units, unit_of, instant_src = _plan(graph, records, lambda r: host_floor_s(
        r.rule, r.kernels, floor, dev.efficiency, opts, module_host_s(calls.get(r.name, (0, 0)), dev.efficiency)))
    for u in units:
        u.priority = prio[u.index]
    cap = DeviceCapacity.of(dev, power_cap=opts.power_cap)
    demands = {m: KernelDemand.from_record(records[m], cap, priority=u.priority)
               for u in units if not u.link for m in u.members}
    fluid = FluidDevice(cap)
    begin, end = _run(graph.name, units, records, demands, fluid, streams, trace)

    start, finish = _op_times(len(records), units, unit_of, instant_src, begin, end)
    makespan = max(finish, default=0.0)
    idle_w = float(dev.power.idle_w)
    static, overlap_s = _share_idle_energy(records, start, finish, idle_w)
    out = _scheduled_records(records, units, unit_of, prio, start, finish, static, fluid.slowed)
    warnings = _schedule_warnings(base, units, streams, overlap_s, makespan, fluid, idle_w, float(dev.power.tdp_w),
                                  opts.power_cap)
    for w in sorted(warnings - set(base.warnings)):
        logger.info("%s", w)

    return _des_report(base, out, warnings, makespan, idle_w, fluid, provenance={
        "engine": ENGINE_NAME, "streams": streams, "launch_overhead_s": floor,
        **({"priorities": {k: int(priorities[k]) for k in sorted(priorities)}} if priorities else {})})


def _checked_options(graph: OpGraph, streams: int, options: EvalOptions | None,
                     priorities: Mapping[str, int] | None) -> tuple[EvalOptions, list[int]]:
    """The options :func:`simulate` runs with and each op's priority, after checking ``streams``, the
    priorities and that there is no plan (in that order)."""
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ValueError(f"simulate: streams: not a positive integer; got {streams!r}; expected an integer >= 1")
    prio = _priorities(graph, priorities)
    opts = options or EvalOptions()
    if opts.plan is not None:
        raise ValueError(f"simulate: options.plan: a parallel plan is not simulated op by op on one device; got "
                         f"{opts.plan!r}; expected no plan here: use simulator.parallel.evaluate_plan(..., "
                         "engine='des') for a plan's schedule")
    return opts, prio


def _des_report(base: CostReport, records: list[OpCost], warnings: set[str], makespan: float, idle_w: float,
                fluid: FluidDevice, provenance: dict[str, Any]) -> CostReport:
    """The simulated run's report: the analytical totals with the makespan as latency and the idle
    power over the makespan as static energy; provenance with the engine's and the contention's."""
    bt = base.totals
    static_total = idle_w * makespan
    energy = bt.dynamic_energy_j + static_total
    achieved = bt.flops / makespan if makespan > 0 else 0.0
    totals = replace(
        bt, latency_s=makespan, energy_j=energy, static_energy_j=static_total,
        avg_power_w=energy / makespan if makespan > 0 else 0.0, achieved_flops_per_s=achieved,
        mfu=achieved / bt.peak_flops_per_s if bt.peak_flops_per_s else 0.0,
    )
    prov = {**base.provenance, **provenance}
    prov["contention"] = {
        "model": "fluid: SM slots by occupancy and waves; DRAM, L2, host link and power by demand",
        "limited_s": {k: fluid.limited_s[k] for k in sorted(fluid.limited_s)},
        "slowed_ops": len(fluid.slowed),
    }
    return CostReport(model=base.model, hardware=base.hardware, records=tuple(records), totals=totals,
                      memory=base.memory, warnings=tuple(sorted(warnings)), provenance=prov)


def _op_times(n: int, units: list[_Unit], unit_of: dict[int, int], instant_src: dict[int, list[int]],
              begin: dict[int, float], end: dict[int, float]) -> tuple[list[float], list[float]]:
    """Start and finish (s) of every op: a unit's members from the run; an op that takes no resource
    (instantaneous) when its sources are done. Sets each unit's ``start_s``."""
    start = [0.0] * n
    finish = [0.0] * n
    for u in units:
        for m in u.members:
            start[m], finish[m] = begin[m], end[m]
        u.start_s = start[u.members[0]]
    for i in range(n):
        if i not in unit_of:  # instantaneous: when its sources are done
            t = max((finish[s] for s in instant_src[i]), default=0.0)
            start[i] = finish[i] = t
    return start, finish


def _scheduled_records(records: tuple[OpCost, ...], units: list[_Unit], unit_of: dict[int, int], prio: list[int],
                       start: list[float], finish: list[float], static: list[float],
                       slowed_ops: Collection[int]) -> list[OpCost]:
    """The analytical records with their place in the schedule (:class:`ScheduledOpCost`) and their
    share of the idle energy."""
    out: list[OpCost] = []
    base_names = [f.name for f in fields(OpCost)]
    for i, r in enumerate(records):
        vals = {k: getattr(r, k) for k in base_names}
        vals["static_energy_j"] = static[i]
        vals["energy_j"] = r.dynamic_energy_j + static[i]
        # an op never slowed keeps its record's time exactly (end - start equals it up to rounding)
        vals["time_s"] = finish[i] - start[i] if i in slowed_ops else r.time_s
        vals["standalone_s"] = r.time_s
        if i in unit_of:
            u = units[unit_of[i]]
            head = u.index == i
            vals.update(ready_s=u.ready_s if head else start[i],
                        launch_start_s=u.launch_start_s if head and u.launched else start[i],
                        launch_end_s=u.launch_end_s if head and u.launched else start[i],
                        track=u.track, priority=u.priority)
        else:
            vals.update(ready_s=start[i], launch_start_s=start[i], launch_end_s=start[i], track="",
                        priority=prio[i])
        vals.update(start_s=start[i], end_s=finish[i])
        out.append(ScheduledOpCost(**vals))
    return out


def _schedule_warnings(base: CostReport, units: list[_Unit], streams: int, overlap_s: float, makespan: float,
                       fluid: FluidDevice, idle_w: float, tdp: float, power_cap: bool) -> set[str]:
    """The analytical report's warnings and those of the schedule: overlapping kernels, power limiting,
    and concurrent draw above the TDP when the cap is off."""
    warnings = set(base.warnings)
    if overlap_s > 0:
        where = f"{streams} stream(s)" + (" and the link" if any(u.link for u in units) else "")
        warnings.add(f"discrete-event schedule: kernels overlap for {overlap_s:.3g} s of {makespan:.3g} s on "
                     f"{where}; they share SM slots (occupancy, waves), DRAM and L2 bandwidth and the power "
                     "limit by the fluid model of docs/des.md (not modelled: L2 capacity interference, "
                     "collectives' use of SMs and DRAM)")
    limited = fluid.limited_s
    if limited.get("power", 0.0) > 0:
        warnings.add(f"discrete-event schedule: concurrent kernels slowed for {limited['power']:.3g} s to keep "
                     f"the device within its TDP {tdp:.0f} W together")
    if not power_cap and idle_w + fluid.dynamic_w_max > tdp * (1.0 + _REL_EPS):
        warnings.add(f"discrete-event schedule: concurrent kernels draw up to {idle_w + fluid.dynamic_w_max:.0f} W, "
                     f"more than the TDP {tdp:.0f} W; not throttled (power_cap is off)")
    return warnings


def _priorities(graph: OpGraph, priorities: Mapping[str, int] | None) -> list[int]:
    """Each op's priority (program order) from ``priorities`` (see :func:`simulate`); validates the mapping."""
    ops = graph.ops
    if not priorities:
        return [0] * len(ops)
    if not isinstance(priorities, Mapping):
        raise ValueError(f"simulate: priorities: not a mapping; got a {type(priorities).__name__}; expected "
                         "{'op group or op name': integer priority}")
    names = {op.name for op in ops}
    groups: set[str] = set()
    for op in ops:
        parts = op.group.split("/") if op.group else []
        groups.update("/".join(parts[:k]) for k in range(1, len(parts) + 1))
    problems = []
    for key in sorted(priorities, key=str):
        val = priorities[key]
        if not isinstance(key, str) or (key not in names and key not in groups):
            from nodeperf.suggest import did_you_mean

            problems.append(f"simulate: priorities: {key!r}: no op or group of graph {graph.name!r} has this name; "
                            f"expected an op name or group{did_you_mean(str(key), sorted(names | groups))}")
        elif isinstance(val, bool) or not isinstance(val, int):
            problems.append(f"simulate: priorities: {key!r}: not an integer; got {val!r}; expected an integer "
                            "(lower is more urgent)")
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else
                         f"simulate: priorities: {len(problems)} problems:\n  " + "\n  ".join(problems))

    def of(op: Op) -> int:
        if op.name in priorities:
            return int(priorities[op.name])
        parts = op.group.split("/") if op.group else []
        for k in range(len(parts), 0, -1):
            g = "/".join(parts[:k])
            if g in priorities:
                return int(priorities[g])
        return 0

    return [of(op) for op in ops]


def _plan(graph: OpGraph, records: tuple[OpCost, ...], host_s: Callable[[OpCost], float]
          ) -> tuple[list[_Unit], dict[int, int], dict[int, tuple[int, ...]]]:
    """Group ops into schedulable units and resolve each unit's dependencies to other units.

    Returns the units (program order), the unit of each op that belongs to one, and for each
    instantaneous op the ops whose completion it waits for.
    """
    ops = graph.ops
    index = {op.name: i for i, op in enumerate(ops)}
    unit_of: dict[int, int] = {}
    units: list[_Unit] = []
    instant: set[int] = set()
    for i, (op, r) in enumerate(zip(ops, records, strict=True)):
        if r.fused_into and r.fused_into in index and index[r.fused_into] in unit_of:
            u = unit_of[index[r.fused_into]]
            units[u].members.append(i)
            unit_of[i] = u
        elif r.kernels == 0 and r.time_s == 0.0:
            instant.add(i)
        else:
            link = op.kind in COLLECTIVE_KINDS and not r.fallback
            unit_of[i] = len(units)
            units.append(_Unit(index=i, members=[i], link=link, launch_s=host_s(r),
                               launched=r.kernels > 0, deps=[]))

    # the units an op's completion stands for: itself, or (instantaneous ops) its inputs' units
    sources: dict[int, frozenset[int]] = {}
    preds = [[index[p] for p in graph.predecessors(op.name)] for op in ops]
    for i in range(len(ops)):  # topological order: predecessors are resolved first
        if i in instant:
            acc: set[int] = set()
            for p in preds[i]:
                acc |= sources[p]
            sources[i] = frozenset(acc)
        else:
            sources[i] = frozenset((units[unit_of[i]].index,))
    for u in units:
        deps: set[int] = set()
        for m in u.members:
            for p in preds[m]:
                deps |= sources[p]
        deps.discard(u.index)
        u.deps = sorted(unit_of[d] for d in deps)
    instant_src = {i: tuple(sorted(m for s in sources[i] for m in units[unit_of[s]].members)) for i in instant}
    return units, unit_of, instant_src


def _run(name: str, units: list[_Unit], records: tuple[OpCost, ...], demands: dict[int, KernelDemand],
         fluid: FluidDevice, streams: int, trace: bool) -> tuple[dict[int, float], dict[int, float]]:
    """Run the SimPy model; fills the units' times and returns the start and end time of every unit member."""
    sim = _Simulation(units, records, demands, fluid, streams, trace)
    env = sim.env
    env.process(sim.host())
    env.process(sim.device())
    for k, u in enumerate(units):
        env.process(sim.run_unit(k, u))
    env.run()
    stuck = [u for u in units if not u.done]
    if stuck:  # cannot happen for a DAG in topological order; say so loudly if it does
        raise RuntimeError(f"simulate: graph {name!r}: {len(stuck)} op(s) never ran (first: "
                           f"{records[stuck[0].index].name!r}); expected every op to complete on {fluid.capacity.name}")
    return sim.begin, sim.end


class _Simulation:
    """The SimPy processes of one run: the host launching units in program order, the fluid device
    sharing itself among running kernels, and one process per unit (wait, launch, take a stream or the
    link, run its members). ``begin``/``end`` collect each member's start and end time (s)."""

    def __init__(self, units: list[_Unit], records: tuple[OpCost, ...], demands: dict[int, KernelDemand],
                 fluid: FluidDevice, streams: int, trace: bool) -> None:
        self.env = env = simpy.Environment()
        self.units, self.records, self.demands, self.fluid, self.trace = units, records, demands, fluid, trace
        self.stream_res = simpy.PriorityResource(env, capacity=streams)
        self.link_res = simpy.PriorityResource(env, capacity=1)
        self.free_streams = list(range(streams))  # lowest free stream id first (a heap)
        self.done = [env.event() for _ in units]
        self.launched = [env.event() for _ in units]
        self.begin: dict[int, float] = {}
        self.end: dict[int, float] = {}
        self.finished: dict[int, simpy.Event] = {}  # kernel (op index) -> its completion on the device
        self.wake: simpy.Event = env.event()
        self.owner: dict[int, _Unit] = {m: u for u in units for m in u.members}

    def log(self, what: str, u: _Unit, m: int | None = None) -> None:
        if self.trace:
            i = u.index if m is None else m
            logger.debug("t=%.9e s %s %s%s", self.env.now, what, self.records[i].name,
                         f" on {u.track}" if u.track else "")

    def host(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for k, u in enumerate(self.units):
            if not u.launched:
                continue
            u.launch_start_s = env.now
            self.log("launch", u)
            self.launched[k].succeed()
            yield env.timeout(u.launch_s)
            u.launch_end_s = env.now

    def device(self) -> Generator[simpy.Event, Any, None]:
        """The fluid device: re-shares at every arrival and phase end, completes kernels."""
        env, fluid = self.env, self.fluid
        while True:
            started, ended = fluid.step(env.now)
            for m in started:
                self.begin[m] = env.now
                if m == self.owner[m].members[0]:
                    self.log("start", self.owner[m])
            for m in ended:
                self.begin.setdefault(m, fluid.starts[m])
                self.end[m] = env.now
                self.finished.pop(m).succeed()
            nxt = fluid.next_event_s()
            self.wake = env.event()
            if nxt is None:
                yield self.wake
            else:
                yield self.wake | env.timeout(max(nxt - env.now, 0.0))

    def submit(self, m: int) -> simpy.Event:
        ev = self.env.event()
        self.finished[m] = ev
        self.fluid.add(m, self.demands[m], self.env.now)
        if not self.wake.triggered:
            self.wake.succeed()
        return ev

    def run_unit(self, k: int, u: _Unit) -> Generator[simpy.Event, Any, None]:
        env, records = self.env, self.records
        if u.deps:
            yield env.all_of([self.done[d] for d in u.deps])
        u.ready_s = env.now
        if u.launched:
            yield self.launched[k]
        res = self.link_res if u.link else self.stream_res
        with res.request(priority=(u.priority, u.index)) as req:
            yield req
            sid = -1
            if u.link:
                u.track = LINK_TRACK
                self.begin[u.index] = env.now
                self.log("start", u)
                yield env.timeout(records[u.index].time_s)
                self.end[u.index] = env.now
            else:
                sid = heapq.heappop(self.free_streams)
                u.track = stream_track(sid)
                for m in u.members:
                    if records[m].time_s <= 0:  # nothing to run: done where the previous part ended
                        self.begin[m] = self.end[m] = env.now
                        continue
                    yield self.submit(m)
            if sid >= 0:
                heapq.heappush(self.free_streams, sid)
            self.log("end", u)
        u.done = True
        self.done[k].succeed()


def _share_idle_energy(records: tuple[OpCost, ...], start: list[float], finish: list[float],
                       idle_w: float) -> tuple[list[float], float]:
    """Per-op share of ``idle_w x makespan`` (J) and the time during which ops overlap (s).

    Each instant's idle energy is split equally among the ops running then; an interval with none
    running is charged to the first op that starts after it.
    """
    n = len(records)
    static = [0.0] * n
    starts: dict[float, list[int]] = {}
    ends: dict[float, list[int]] = {}
    for i in range(n):
        if finish[i] > start[i]:
            starts.setdefault(start[i], []).append(i)
            ends.setdefault(finish[i], []).append(i)
    points = sorted(set(starts) | set(ends))
    if not points:
        return static, 0.0
    active: set[int] = set()
    gap_j = points[0] * idle_w  # before the first op starts
    overlap_s = 0.0
    for a, b in pairwise(points):
        active.difference_update(ends.get(a, ()))
        active.update(starts.get(a, ()))
        dt = b - a
        if not active:
            gap_j += idle_w * dt
            continue
        run = sorted(active)
        if gap_j:
            static[run[0]] += gap_j
            gap_j = 0.0
        share = idle_w * dt / len(run)
        for i in run:
            static[i] += share
        if len(run) > 1:
            overlap_s += dt
    return static, overlap_s

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
  ``streams``; waiting ops are served in program order) and holds it for its record's time;
* collectives (``all_reduce``, ``all_gather``, ...) run on a separate **link** resource (capacity
  one: one communicator), so communication overlaps compute;
* ops that relabel memory (views) and zero-time ops without kernels take no resource and finish
  as soon as their inputs are ready; elementwise ops fused into a producer (``EvalOptions.fusion``)
  run on the producer's stream right after it, inside the same launch.

Energy is each op's dynamic energy (from the records) plus the device's idle power over the
makespan. The idle energy of every instant is shared equally among the ops running then (an
instant with none running is charged to the next op that starts), so per-op energies still sum
to the total. Concurrent kernels run at their standalone speed (no sharing of SMs or memory
bandwidth) and are not power-capped together: the overlap is an upper bound, and the report
warns when it happens.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Generator
from dataclasses import dataclass, fields, replace
from itertools import pairwise
from typing import Any

import simpy

from hwmodels.spec import DeviceSpec, SystemSpec
from simulator.engines.analytical import EvalOptions, evaluate, launch_floor_s, spec_of
from simulator.lowering import COLLECTIVE_KINDS  # run on the link resource instead of a stream
from simulator.report import CostReport, OpCost
from workloads.ir import OpGraph

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


@dataclass(frozen=True)
class ScheduledOpCost(OpCost):
    """An :class:`~simulator.report.OpCost` with its place in the simulated schedule (seconds from 0).

    Attributes
    ----------
    ready_s
        When all of the op's predecessors had completed.
    launch_start_s, launch_end_s
        The host's launch slot for the op (``launch_end_s - launch_start_s`` is ``kernels x`` the
        per-kernel launch overhead); both equal ``start_s`` for ops launched with another (fused)
        or not launched at all (views).
    start_s, end_s
        When the op ran on its track (``end_s - start_s`` is ``time_s`` up to float rounding).
    track
        ``"stream N"``, ``"link"``, or ``""`` for ops that take no resource (views, no-ops).
    """

    ready_s: float = 0.0
    launch_start_s: float = 0.0
    launch_end_s: float = 0.0
    start_s: float = 0.0
    end_s: float = 0.0
    track: str = ""


@dataclass
class _Unit:
    """What holds a resource once: a kernel op and the ops fused into it, or a collective."""

    index: int  # program index of the head op
    members: list[int]
    link: bool
    launch_s: float  # host time to launch it (0: not launched by the host)
    launched: bool
    deps: list[int]  # indices (into the unit list) of the units it waits for, ascending
    ready_s: float = 0.0
    launch_start_s: float = 0.0
    launch_end_s: float = 0.0
    start_s: float = 0.0
    track: str = ""
    done: bool = False


def simulate(graph: OpGraph, system: DeviceSpec | SystemSpec, options: EvalOptions | None = None, *,
             streams: int = 1, trace: bool = False) -> CostReport:
    """Simulate ``graph`` on ``system`` event by event: dependencies, launches, streams and links.

    Parameters
    ----------
    graph
        The workload (any :class:`~workloads.ir.OpGraph`).
    system
        A device, or a system whose device runs the graph (collectives use its fabric).
    options
        :class:`~simulator.engines.analytical.EvalOptions`, as for :func:`~simulator.engines.analytical.evaluate`.
    streams
        Compute streams of the device: how many kernels may run at once (1: in-order execution).
    trace
        Log every scheduling event (launch, start, end) at DEBUG level through this module's logger.

    Returns
    -------
    CostReport
        The same contract as ``evaluate``: records in program order (each a
        :class:`ScheduledOpCost` carrying its start and end times in s), totals whose
        ``latency_s`` is the makespan, memory check, warnings, and provenance with
        ``engine = "des"`` and ``streams``. Deterministic: the same inputs give byte-identical
        ``to_json()``.

    Raises
    ------
    ValueError
        ``streams`` is not a positive integer.

    Examples
    --------
    >>> from hwmodels.catalog import load_device
    >>> from workloads.zoo import build_model
    >>> g, h100 = build_model("inception_v3"), load_device("h100-sxm5-80gb")
    >>> simulate(g, h100, streams=2).latency_s <= simulate(g, h100).latency_s == evaluate(g, h100).latency_s
    True
    """
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ValueError(f"simulate: streams: not a positive integer; got {streams!r}; expected an integer >= 1")
    opts = options or EvalOptions()
    base = evaluate(graph, system, opts)
    dev = spec_of(system)[0]
    floor = launch_floor_s(dev, opts)
    records = base.records
    ops = graph.ops
    if len(records) != len(ops) or any(r.name != op.name for r, op in zip(records, ops, strict=True)):
        raise RuntimeError(f"simulate: graph {graph.name!r}: the analytical records do not follow the graph's "
                           "program order; expected one record per op, in order")

    units, unit_of, instant_src = _plan(graph, records, floor)
    end = _run(graph.name, units, records, streams, trace)

    n = len(records)
    start = [0.0] * n
    finish = [0.0] * n
    for u in units:
        t = u.start_s
        for m in u.members:
            start[m] = t
            t = end[m]
            finish[m] = t
    for i in range(n):
        if i not in unit_of:  # instantaneous: when its sources are done
            t = max((finish[s] for s in instant_src[i]), default=0.0)
            start[i] = finish[i] = t
    makespan = max(finish, default=0.0)

    idle_w = float(dev.power.idle_w)
    static, over_tdp_s, overlap_s = _share_idle_energy(records, start, finish, idle_w, float(dev.power.tdp_w))

    out: list[OpCost] = []
    base_names = [f.name for f in fields(OpCost)]
    for i, r in enumerate(records):
        vals = {k: getattr(r, k) for k in base_names}
        vals["static_energy_j"] = static[i]
        vals["energy_j"] = r.dynamic_energy_j + static[i]
        if i in unit_of:
            u = units[unit_of[i]]
            head = u.index == i
            vals.update(ready_s=u.ready_s if head else start[i],
                        launch_start_s=u.launch_start_s if head and u.launched else start[i],
                        launch_end_s=u.launch_end_s if head and u.launched else start[i],
                        track=u.track)
        else:
            vals.update(ready_s=start[i], launch_start_s=start[i], launch_end_s=start[i], track="")
        vals.update(start_s=start[i], end_s=finish[i])
        out.append(ScheduledOpCost(**vals))

    warnings = set(base.warnings)
    if overlap_s > 0:
        where = f"{streams} stream(s)" + (" and the link" if any(u.link for u in units) else "")
        warnings.add(f"discrete-event schedule: kernels overlap for {overlap_s:.3g} s of {makespan:.3g} s on "
                     f"{where}; concurrent kernels are assumed to run at their standalone "
                     "speed (no sharing of compute units or memory bandwidth), so the overlap is an upper bound")
    if over_tdp_s > 0:
        warnings.add(f"discrete-event schedule: concurrent kernels draw more than the TDP "
                     f"{dev.power.tdp_w:.0f} W for {over_tdp_s:.3g} s; they are not throttled together")
    for w in sorted(warnings - set(base.warnings)):
        logger.info("%s", w)

    bt = base.totals
    static_total = idle_w * makespan
    energy = bt.dynamic_energy_j + static_total
    achieved = bt.flops / makespan if makespan > 0 else 0.0
    totals = replace(
        bt, latency_s=makespan, energy_j=energy, static_energy_j=static_total,
        avg_power_w=energy / makespan if makespan > 0 else 0.0, achieved_flops_per_s=achieved,
        mfu=achieved / bt.peak_flops_per_s if bt.peak_flops_per_s else 0.0,
    )
    prov = dict(base.provenance)
    prov["engine"] = ENGINE_NAME
    prov["streams"] = streams
    prov["launch_overhead_s"] = floor
    return CostReport(model=base.model, hardware=base.hardware, records=tuple(out), totals=totals,
                      memory=base.memory, warnings=tuple(sorted(warnings)), provenance=prov)


def _plan(graph: OpGraph, records: tuple[OpCost, ...], floor: float
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
            units.append(_Unit(index=i, members=[i], link=link, launch_s=r.kernels * floor,
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


def _run(name: str, units: list[_Unit], records: tuple[OpCost, ...], streams: int, trace: bool) -> dict[int, float]:
    """Run the SimPy model; fills the units' times and returns the end time of every unit member."""
    env = simpy.Environment()
    stream_res = simpy.PriorityResource(env, capacity=streams)
    link_res = simpy.PriorityResource(env, capacity=1)
    free_streams = list(range(streams))  # lowest free stream id first (a heap)
    done = [env.event() for _ in units]
    launched = [env.event() for _ in units]
    end: dict[int, float] = {}

    def log(what: str, u: _Unit) -> None:
        if trace:
            logger.debug("t=%.9e s %s %s%s", env.now, what, records[u.index].name, f" on {u.track}" if u.track else "")

    def host() -> Generator[simpy.Event, Any, None]:
        for k, u in enumerate(units):
            if not u.launched:
                continue
            u.launch_start_s = env.now
            log("launch", u)
            launched[k].succeed()
            yield env.timeout(u.launch_s)
            u.launch_end_s = env.now

    def run_unit(k: int, u: _Unit) -> Generator[simpy.Event, Any, None]:
        if u.deps:
            yield env.all_of([done[d] for d in u.deps])
        u.ready_s = env.now
        if u.launched:
            yield launched[k]
        res = link_res if u.link else stream_res
        with res.request(priority=u.index) as req:
            yield req
            u.start_s = env.now
            sid = -1
            if u.link:
                u.track = LINK_TRACK
            else:
                sid = heapq.heappop(free_streams)
                u.track = stream_track(sid)
            log("start", u)
            for m in u.members:
                yield env.timeout(records[m].time_s)
                end[m] = env.now
            if sid >= 0:
                heapq.heappush(free_streams, sid)
            log("end", u)
        u.done = True
        done[k].succeed()

    env.process(host())
    for k, u in enumerate(units):
        env.process(run_unit(k, u))
    env.run()
    stuck = [u for u in units if not u.done]
    if stuck:  # cannot happen for a DAG in topological order; say so loudly if it does
        raise RuntimeError(f"simulate: graph {name!r}: {len(stuck)} op(s) never ran (first: "
                           f"{records[stuck[0].index].name!r}); expected every op to complete")
    return end


def _share_idle_energy(records: tuple[OpCost, ...], start: list[float], finish: list[float], idle_w: float,
                       tdp_w: float) -> tuple[list[float], float, float]:
    """Per-op share of ``idle_w x makespan`` (J), time above the TDP (s) and time with overlap (s).

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
        return static, 0.0, 0.0
    dyn_w = [r.dynamic_energy_j / r.time_s if r.time_s > 0 else 0.0 for r in records]
    active: set[int] = set()
    gap_j = points[0] * idle_w  # before the first op starts
    over_s = overlap_s = 0.0
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
            if idle_w + sum(dyn_w[i] for i in run) > tdp_w * (1.0 + _REL_EPS):
                over_s += dt
    return static, over_s, overlap_s

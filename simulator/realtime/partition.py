"""Place a graph's ops on the devices of a heterogeneous node: exact optima where they are tractable, a
documented heuristic beyond, and pipelined throughput for batched streams.

Model
-----
*Op costs.* Every op is costed on every device of the node by the analytical engine
(:func:`simulator.engines.analytical.evaluate`) with ``fusion=False`` and ``l2_residency=False``:
an op's cost then does not depend on where its neighbours run (no fusion or L2 reuse across a
device boundary is possible, and none is assumed within one), so costs are additive and the
optimisation below is exact for the model. The best-single-device baseline uses the same costs.
An op a device cannot run (its lowering raises :class:`NotImplementedError`, e.g. an op kind a
DLA has no rule for, or :class:`~hwmodels.spec.SpecError`, e.g. a dtype without a rate) has infinite
cost there; the reason is kept and reported, and the op is never placed there.

*Transfers.* A tensor produced on device ``s`` and consumed by ops on other devices is sent once to
each such device ``d``: ``link.latency_s + bytes / (link.bandwidth_bytes_per_s x
link.bandwidth_fraction)`` seconds and ``bytes x link.energy_j_per_byte`` joules
(:class:`hwmodels.node.NodeLink`). Devices without a link cannot exchange tensors. Weights and the
graph's input tensors are resident on every device that consumes them; outputs are not sent back.

*Latency* (objective ``latency``) is the sequential sum: ops run one at a time in dependency
order (the analytical engine's one-stream convention), and transfers are not overlapped with
compute: ``sum(op time on its device) + sum(transfer times)``. This is not a multi-device
makespan: two independent branches placed on two devices are not credited with running at once.

*Energy* (objective ``energy``) is ``sum(dynamic op energy) + sum(link energy) + sum over powered
devices of idle_w x latency``. With ``idle="used"`` (default) a device on which no op is placed is
taken as power-gated (it draws nothing) and every device that runs an op draws its idle power during
the whole latency; with ``idle="all"`` every device of the node draws its idle power (nothing is
gated), which is what an installed but unused accelerator costs. Both
latency and energy are reported whatever the objective.

*Throughput* (objective ``throughput``, a batched stream of inputs) pipelines the graph: the
topological order is cut into contiguous stages, each on a different device; stages and the
transfers between them overlap across successive inputs, so the stream runs at
``1 / max(stage time, cut transfer time)`` inputs per second. A tensor crossing several cuts is
forwarded stage by stage (charged at every cut it crosses).

Algorithms (what is exact)
--------------------------
* ``dp`` (default first try): dynamic programming over the topological order whose state is, for
  every *live* tensor (produced, still awaiting consumers), its source device and the set of
  devices that already hold a copy. It is exact for any DAG and any placement (not only contiguous
  segments) as long as the state count stays within ``max_states``; the live set of a transformer or
  CNN in topological order is 2-4 tensors, so the zoo's graphs are solved exactly. Chains are the
  special case of one live tensor (a DP over cut points).
* ``milp``: ``scipy.optimize.milp`` over binaries ``x[op, device]`` and linearised transfer terms
  ``z[tensor, src, dst] >= x[producer, src] + x[consumer, dst] - 1`` (continuous in [0, 1], tight at
  the optimum), with ``x[producer, s] + x[consumer, d] <= 1`` where ``s`` and ``d`` have no link.
  Exact; used for DAGs of at most :data:`MILP_MAX_OPS` ops when the DP had to prune.
* Heuristic beyond that: the same DP keeping only the ``max_states`` cheapest states at each step
  (beam search), then local search (moving single ops to another device while the objective
  improves). The result says ``exact: false``.
* Energy: the idle term depends on which devices are used, so the DP (or MILP) is run once per
  non-empty subset ``S`` of devices with per-op cost ``dynamic + idle(S) x time`` restricted to ``S``;
  the best over subsets is the exact optimum (the true optimum's own used set evaluates it exactly,
  any other subset over-counts).
* Throughput: for every ordered sequence of distinct devices, a DP over cut points minimises the
  bottleneck (vectorised over the previous cut); exact for contiguous-stage pipelines.

Examples
--------
>>> from simulator.realtime.partition import partition
>>> from hwmodels.node import load_node
>>> from workloads.resolve import load_workload
>>> result = partition(load_workload("resnet50"), load_node("h100-plus-systolic128"))
>>> sorted(set(result.placement.values()))  # doctest: +SKIP
['gpu']
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwmodels.node import NodeSpec
from hwmodels.spec import SpecError
from nodeperf.errors import NodeperfError
from nodeperf.suggest import did_you_mean
from workloads.ir import OpGraph

__all__ = [
    "OBJECTIVES",
    "IDLE_POLICIES",
    "MILP_MAX_OPS",
    "DEFAULT_MAX_STATES",
    "PartitionError",
    "CostTable",
    "PartitionProblem",
    "Transfer",
    "Stage",
    "PartitionResult",
    "cost_table",
    "build_problem",
    "evaluate_placement",
    "solve_dp",
    "solve_milp",
    "solve_brute_force",
    "solve_pipeline",
    "partition",
    "check_objective",
]

logger = logging.getLogger(__name__)

#: What a partition may minimise (``throughput`` maximises the pipelined rate).
OBJECTIVES: tuple[str, ...] = ("latency", "throughput", "energy")
#: Which devices draw idle power in the energy figures: those a placement uses, or all of the node's.
IDLE_POLICIES: tuple[str, ...] = ("used", "all")
#: Largest graph handed to the MILP when the DP had to prune its states.
MILP_MAX_OPS = 60
#: States the DP keeps per step before it turns into a beam search (and says it is not exact).
DEFAULT_MAX_STATES = 4096
_INF = math.inf


class PartitionError(NodeperfError, ValueError):
    """A partition cannot be made (an op no device can run, devices without the links a placement needs)."""


def check_objective(objective: str) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`; a located error with a near match otherwise."""
    if objective not in OBJECTIVES:
        raise PartitionError(f"--objective: unknown objective; got {objective!r}; expected one of "
                             f"{', '.join(OBJECTIVES)}{did_you_mean(str(objective), OBJECTIVES)}")
    return objective


# ------------------------------------------------------------------------------------------------
# op costs on every device


@dataclass(frozen=True)
class CostTable:
    """Per-op costs of a graph on each device of a node (rows: ops in topological order).

    ``time_s[i, k]`` and ``dynamic_energy_j[i, k]`` are ``inf`` where device ``k`` cannot run op
    ``i``; ``reasons[(op, device)]`` says why.
    """

    ops: tuple[str, ...]
    devices: tuple[str, ...]
    time_s: np.ndarray
    dynamic_energy_j: np.ndarray
    idle_w: np.ndarray
    reasons: dict[tuple[str, str], str]
    notes: tuple[str, ...] = ()

    def runnable(self, i: int, k: int) -> bool:
        return bool(np.isfinite(self.time_s[i, k]))


def _options(cuda_graphs: bool = False) -> Any:
    """Evaluation options of the cost table: no fusion, no L2 residency (placement-independent costs)."""
    from simulator.engines.options import options_from_settings

    return options_from_settings({"fusion": False, "l2_residency": False, "cuda_graphs": cuda_graphs},
                                 where="partition")


def _op_signature(op: Any) -> tuple[Any, ...]:
    return (op.kind, tuple((t.shape, t.dtype, t.role) for t in op.inputs),
            tuple((t.shape, t.dtype) for t in op.outputs), hash(op.attrs))


def _cost_on_device(graph: OpGraph, spec: Any, opts: Any) -> tuple[list[float], list[float], dict[str, str], list[str]]:
    """(times, dynamic energies, reasons by op, notes) of every op of ``graph`` on ``spec``."""
    from simulator.engines.analytical import evaluate

    try:
        rep = evaluate(graph, spec, opts)
        by = {r.name: r for r in rep.records}
        notes = [w for w in rep.warnings if "fallback" in w]
        return ([by[o.name].time_s for o in graph], [by[o.name].dynamic_energy_j for o in graph], {}, notes)
    except (NotImplementedError, SpecError) as exc:
        logger.info("%s: whole-graph evaluation failed (%s); costing op by op", getattr(spec, "name", spec), exc)
    times: list[float] = []
    energies: list[float] = []
    reasons: dict[str, str] = {}
    notes: list[str] = []
    cache: dict[tuple[Any, ...], tuple[float, float, str]] = {}
    for op in graph:
        key = _op_signature(op)
        hit = cache.get(key)
        if hit is None:
            try:
                one = OpGraph(f"{graph.name}:{op.name}", [op], meta=graph.meta, inferred={op.name})
                rec = evaluate(one, spec, opts).records[0]
                hit = (rec.time_s, rec.dynamic_energy_j, "fallback" if rec.fallback else "")
            except (NotImplementedError, SpecError) as exc:
                hit = (_INF, _INF, str(exc).splitlines()[0])
            cache[key] = hit
        t, e, why = hit
        times.append(t)
        energies.append(e)
        if not math.isfinite(t):
            reasons[op.name] = why
        elif why == "fallback":
            notes.append(f"op {op.name!r} ({op.kind}) costed by the roofline fallback")
    return times, energies, reasons, notes


def cost_table(graph: OpGraph, node: NodeSpec, *, cuda_graphs: bool = False, profile: Any = None) -> CostTable:
    """Cost every op of ``graph`` on every device of ``node`` (see the module docstring).

    ``cuda_graphs``: ops are replayed from a recorded graph (a CUDA graph, a DLA loadable, an XLA
    program), so each pays ``efficiency.graph_launch_overhead_s`` instead of ``launch_overhead_s``.
    ``profile``: a software stack (:class:`workloads.frameworks.FrameworkProfile`); a device it does not run
    on (eager PyTorch on a DLA) takes no op, as a device that cannot run an op.
    """
    opts = _options(cuda_graphs)
    n, nd = len(graph), len(node.devices)
    time_s = np.empty((n, nd))
    dyn = np.empty((n, nd))
    reasons: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    for k, dev in enumerate(node.devices):
        if profile is not None and not profile.applies_to(dev.spec.kind, dev.spec.vendor):
            time_s[:, k] = dyn[:, k] = np.inf
            reasons.update({(o.name, dev.name): f"the {profile.name} stack does not run on {dev.spec.name}"
                            for o in graph})
            continue
        t, e, why, nts = _cost_on_device(graph, dev.spec, opts)
        time_s[:, k] = t
        dyn[:, k] = e
        for op, r in why.items():
            reasons[(op, dev.name)] = r
        if nts:
            notes.append(f"{dev.name}: {len(nts)} op(s) costed by the roofline fallback")
    idle = np.array([d.device.power.idle_w for d in node.devices], dtype=float)
    return CostTable(ops=tuple(o.name for o in graph), devices=node.device_names, time_s=time_s,
                     dynamic_energy_j=dyn, idle_w=idle, reasons=reasons, notes=tuple(notes))


# ------------------------------------------------------------------------------------------------
# the problem: costs + tensors + links


@dataclass(frozen=True)
class _Tensor:
    name: str
    nbytes: float
    producer: int
    consumers: tuple[int, ...]  # sorted op indices


@dataclass(frozen=True)
class PartitionProblem:
    """Everything a solver needs: op costs, the tensors between ops and the node's links.

    ``link_time_s[s, d]`` / ``link_inv_bw[s, d]`` / ``link_energy_j_per_byte[s, d]`` describe the
    link from device ``s`` to ``d`` (``linked[s, d]`` False where there is none; the diagonal is a
    free "link" of a device to itself).
    """

    name: str
    node: str
    costs: CostTable
    tensors: tuple[_Tensor, ...]
    linked: np.ndarray
    link_latency_s: np.ndarray
    link_inv_bw: np.ndarray
    link_energy_j_per_byte: np.ndarray
    link_names: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def n_ops(self) -> int:
        return len(self.costs.ops)

    @property
    def n_devices(self) -> int:
        return len(self.costs.devices)

    def xfer_time(self, t: _Tensor, s: int, d: int) -> float:
        if s == d:
            return 0.0
        if not self.linked[s, d]:
            return _INF
        return float(self.link_latency_s[s, d] + t.nbytes * self.link_inv_bw[s, d]) if t.nbytes > 0 else 0.0

    def xfer_energy(self, t: _Tensor, s: int, d: int) -> float:
        if s == d:
            return 0.0
        if not self.linked[s, d]:
            return _INF
        return float(t.nbytes * self.link_energy_j_per_byte[s, d])


def build_problem(graph: OpGraph, node: NodeSpec, costs: CostTable | None = None) -> PartitionProblem:
    """The partition problem of ``graph`` on ``node`` (costs every op on every device unless given)."""
    costs = costs or cost_table(graph, node)
    index = {op.name: i for i, op in enumerate(graph)}
    tensors: list[_Tensor] = []
    for op in graph:
        for t in op.outputs:
            cons = sorted({index[c.name] for c in graph.consumers(t.name)})
            if cons:
                tensors.append(_Tensor(t.name, float(t.nbytes), index[op.name], tuple(cons)))
    nd = len(node.devices)
    linked = np.eye(nd, dtype=bool)
    lat = np.zeros((nd, nd))
    inv = np.zeros((nd, nd))
    epb = np.zeros((nd, nd))
    names: dict[tuple[int, int], str] = {}
    dn = node.device_names
    for s in range(nd):
        for d in range(nd):
            if s == d:
                continue
            ln = node.link(dn[s], dn[d])
            if ln is None:
                continue
            linked[s, d] = True
            lat[s, d] = ln.latency_s
            inv[s, d] = 1.0 / ln.effective_bandwidth_bytes_per_s
            epb[s, d] = ln.energy_j_per_byte
            names[(s, d)] = ln.kind
    for i, op in enumerate(costs.ops):
        if not np.isfinite(costs.time_s[i]).any():
            why = "; ".join(f"{d}: {costs.reasons.get((op, d), 'no cost')}" for d in costs.devices)
            raise PartitionError(f"op {op!r}: no device of node {node.name!r} can run it; got {why}; expected at "
                                 "least one device with a lowering rule and a rate for its dtype")
    return PartitionProblem(name=graph.name, node=node.name, costs=costs, tensors=tuple(tensors), linked=linked,
                            link_latency_s=lat, link_inv_bw=inv, link_energy_j_per_byte=epb, link_names=names)


# ------------------------------------------------------------------------------------------------
# evaluating a placement


@dataclass(frozen=True)
class Transfer:
    """One tensor sent from one device to another."""

    tensor: str
    src: str
    dst: str
    nbytes: float
    time_s: float
    energy_j: float

    def to_json(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "from": self.src, "to": self.dst, "bytes": self.nbytes,
                "time_s": self.time_s, "energy_j": self.energy_j}


def evaluate_placement(prob: PartitionProblem, placement: Sequence[int], idle: str = "used") -> dict[str, Any]:
    """Latency, energy, transfers and per-device busy time of ``placement`` (a device index per op).

    Returns ``latency_s`` (sequential sum), ``energy_j`` (dynamic + link + idle power over the latency
    of the used devices, or of every device of the node with ``idle="all"``), ``transfers`` (list of :class:`Transfer`), ``busy_s`` per device and ``used``.
    Infeasible placements (an op on a device that cannot run it, a tensor between unlinked devices)
    give ``latency_s = inf``.
    """
    c = prob.costs
    pl = list(placement)
    op_t = sum(float(c.time_s[i, k]) for i, k in enumerate(pl))
    op_e = sum(float(c.dynamic_energy_j[i, k]) for i, k in enumerate(pl))
    busy = np.zeros(prob.n_devices)
    for i, k in enumerate(pl):
        busy[k] += c.time_s[i, k]
    transfers: list[Transfer] = []
    for t in prob.tensors:
        s = pl[t.producer]
        for d in sorted({pl[ci] for ci in t.consumers} - {s}):
            transfers.append(Transfer(t.name, c.devices[s], c.devices[d], t.nbytes, prob.xfer_time(t, s, d),
                                      prob.xfer_energy(t, s, d)))
    x_t = sum(x.time_s for x in transfers)
    x_e = sum(x.energy_j for x in transfers)
    latency = op_t + x_t
    used = sorted(set(pl))
    idle_w = float(sum(c.idle_w[k] for k in (used if idle == "used" else range(prob.n_devices))))
    energy = op_e + x_e + idle_w * latency
    return {"latency_s": latency, "energy_j": energy, "transfers": transfers, "busy_s": busy,
            "used": [c.devices[k] for k in used], "transfer_time_s": x_t, "transfer_energy_j": x_e}


def _objective_value(prob: PartitionProblem, placement: Sequence[int], objective: str, idle: str = "used") -> float:
    ev = evaluate_placement(prob, placement, idle)
    return ev["latency_s"] if objective == "latency" else ev["energy_j"]


# ------------------------------------------------------------------------------------------------
# exact and heuristic solvers (objective: a weighted sum of additive terms)


def _weights(prob: PartitionProblem, objective: str, subset: Sequence[int] | None) -> tuple[np.ndarray, Any, Any]:
    """(op cost matrix, transfer cost function, allowed device indices) of an additive objective."""
    c = prob.costs
    allowed = list(range(prob.n_devices)) if subset is None else list(subset)
    mask = np.full(prob.n_devices, False)
    mask[allowed] = True
    if objective == "latency":
        w = c.time_s.copy()
        w[:, ~mask] = _INF

        def xc(t: _Tensor, s: int, d: int) -> float:
            return prob.xfer_time(t, s, d)
    else:
        idle = float(sum(c.idle_w[k] for k in allowed))
        with np.errstate(invalid="ignore"):
            w = c.dynamic_energy_j + idle * c.time_s
        w[:, ~mask] = _INF

        def xc(t: _Tensor, s: int, d: int) -> float:
            return prob.xfer_energy(t, s, d) + idle * prob.xfer_time(t, s, d)
    return w, xc, allowed


def solve_dp(prob: PartitionProblem, objective: str = "latency", *, subset: Sequence[int] | None = None,
             max_states: int = DEFAULT_MAX_STATES) -> tuple[float, list[int], bool]:
    """Frontier dynamic programme over the topological order (see the module docstring).

    Returns (objective value under the additive model of ``subset``, placement, exact). ``exact`` is
    False when states were pruned to ``max_states`` (a beam search).
    """
    w, xc, allowed = _weights(prob, objective, subset)
    n = prob.n_ops
    inputs_of, outputs_of, last = _tensor_uses(prob)
    # cache of transfer costs per (tensor, src, dst)
    xcache: dict[tuple[int, int, int], float] = {}

    def xcost(ti: int, s: int, d: int) -> float:
        key = (ti, s, d)
        v = xcache.get(key)
        if v is None:
            v = xc(prob.tensors[ti], s, d)
            xcache[key] = v
        return v

    live: list[int] = []
    states: dict[tuple[int, ...], float] = {(): 0.0}
    back: list[dict[tuple[int, ...], tuple[tuple[int, ...], int]]] = []
    exact = True
    for i in range(n):
        pos = {ti: p for p, ti in enumerate(live)}
        ins = [(ti, pos[ti]) for ti in inputs_of[i] if ti in pos]
        keep = [p for p, ti in enumerate(live) if last[ti] != i]
        new_live = [live[p] for p in keep] + outputs_of[i]
        n_out = len(outputs_of[i])
        devs = [k for k in allowed if math.isfinite(w[i, k])]
        nxt: dict[tuple[int, ...], float] = {}
        bp: dict[tuple[int, ...], tuple[tuple[int, ...], int]] = {}
        for key, cost in states.items():
            for d in devs:
                c = cost + w[i, d]
                vals = list(key)
                ok = True
                bit = 1 << d
                for ti, p in ins:
                    v = vals[p]
                    if not (v & bit):
                        x = xcost(ti, v >> 8, d)
                        if x == _INF:
                            ok = False
                            break
                        c += x
                        vals[p] = v | bit
                if not ok:
                    continue
                nk = tuple([vals[p] for p in keep] + [(d << 8) | bit] * n_out)
                old = nxt.get(nk)
                if old is None or c < old:
                    nxt[nk] = c
                    bp[nk] = (key, d)
        if not nxt:
            raise PartitionError(f"op {prob.costs.ops[i]!r}: no feasible placement; got devices "
                                 f"{', '.join(prob.costs.devices[k] for k in allowed)} without the links its inputs need; "
                                 "expected a link between the devices that produce and consume each tensor")
        if len(nxt) > max_states:
            exact = False
            best = sorted(nxt.items(), key=lambda kv: kv[1])[:max_states]
            nxt = dict(best)
            bp = {k: bp[k] for k in nxt}
        states = nxt
        back.append(bp)
        live = new_live
    key, cost = min(states.items(), key=lambda kv: kv[1])
    placement = [0] * n
    for i in range(n - 1, -1, -1):
        prev, d = back[i][key]
        placement[i] = d
        key = prev
    return float(cost), placement, exact


def _tensor_uses(prob: PartitionProblem) -> tuple[list[list[int]], list[list[int]], dict[int, int]]:
    """Per op, the tensors it reads and writes; per tensor, its last consumer."""
    n = prob.n_ops
    inputs_of: list[list[int]] = [[] for _ in range(n)]
    outputs_of: list[list[int]] = [[] for _ in range(n)]
    last: dict[int, int] = {}
    for ti, t in enumerate(prob.tensors):
        outputs_of[t.producer].append(ti)
        for ci in t.consumers:
            inputs_of[ci].append(ti)
        last[ti] = t.consumers[-1]
    return inputs_of, outputs_of, last


def solve_milp(prob: PartitionProblem, objective: str = "latency", *,
               subset: Sequence[int] | None = None, time_limit_s: float = 60.0) -> tuple[float, list[int], bool]:
    """Exact placement by mixed-integer programming (``scipy.optimize.milp``); see the module docstring.

    Returns (objective value, placement, optimal) where ``optimal`` is False if the solver stopped at
    its time limit with a feasible but unproven solution.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    w, xc, allowed = _weights(prob, objective, subset)
    n = prob.n_ops
    xvar: dict[tuple[int, int], int] = {}
    cost: list[float] = []
    for i in range(n):
        for k in allowed:
            if math.isfinite(w[i, k]):
                xvar[(i, k)] = len(cost)
                cost.append(float(w[i, k]))
    nx = len(cost)
    zvar: dict[tuple[int, int, int], int] = {}
    rows: list[tuple[dict[int, float], float, float]] = []
    for i in range(n):
        rows.append(({xvar[(i, k)]: 1.0 for k in allowed if (i, k) in xvar}, 1.0, 1.0))
    for ti, t in enumerate(prob.tensors):
        for s in allowed:
            if (t.producer, s) not in xvar:
                continue
            for d in allowed:
                if d == s:
                    continue
                cons = [ci for ci in t.consumers if (ci, d) in xvar]
                if not cons:
                    continue
                x = xc(t, s, d)
                if x == _INF:
                    for ci in cons:
                        rows.append(({xvar[(t.producer, s)]: 1.0, xvar[(ci, d)]: 1.0}, -_INF, 1.0))
                    continue
                zi = len(cost)
                zvar[(ti, s, d)] = zi
                cost.append(x)
                for ci in cons:
                    rows.append(({xvar[(t.producer, s)]: 1.0, xvar[(ci, d)]: 1.0, zi: -1.0}, -_INF, 1.0))
    nv = len(cost)
    a = lil_matrix((len(rows), nv))
    lo = np.empty(len(rows))
    hi = np.empty(len(rows))
    for r, (coef, lb, ub) in enumerate(rows):
        for j, v in coef.items():
            a[r, j] = v
        lo[r], hi[r] = lb, ub
    integrality = np.zeros(nv)
    integrality[:nx] = 1
    res = milp(np.array(cost), constraints=LinearConstraint(a.tocsr(), lo, hi), integrality=integrality,
               bounds=Bounds(0.0, 1.0), options={"time_limit": time_limit_s})
    if res.x is None:
        raise PartitionError(f"graph {prob.name!r} on node {prob.node!r}: no feasible placement (MILP status "
                             f"{res.status}: {res.message}); expected links between the devices that must exchange tensors")
    placement = [0] * n
    for (i, k), j in xvar.items():
        if res.x[j] > 0.5:
            placement[i] = k
    return float(res.fun), placement, res.status == 0


def solve_brute_force(prob: PartitionProblem, objective: str = "latency", idle: str = "used") -> tuple[float, list[int]]:
    """Every placement of every op on every device (test oracle; at most 12 ops)."""
    if prob.n_ops > 12:
        raise PartitionError(f"brute force: graph {prob.name!r} has {prob.n_ops} ops; expected at most 12")
    best, arg = _INF, None
    for pl in itertools.product(range(prob.n_devices), repeat=prob.n_ops):
        v = _objective_value(prob, pl, objective, idle)
        if v < best:
            best, arg = v, list(pl)
    if arg is None:
        raise PartitionError(f"graph {prob.name!r}: no feasible placement on node {prob.node!r}")
    return best, arg


def _local_search(prob: PartitionProblem, placement: list[int], objective: str,
                  subset: Sequence[int] | None, max_passes: int = 5) -> list[int]:
    """Move single ops to another allowed device while the additive objective of ``subset`` improves.

    Each move is priced incrementally: the op's own cost and the transfer costs of the tensors it
    produces or consumes (first improvement, at most ``max_passes`` sweeps).
    """
    w, xc, allowed = _weights(prob, objective, subset)
    pl = list(placement)
    touching: list[list[int]] = [[] for _ in range(prob.n_ops)]
    for ti, t in enumerate(prob.tensors):
        for i in {t.producer, *t.consumers}:
            touching[i].append(ti)

    def tcost(ti: int) -> float:
        t = prob.tensors[ti]
        s = pl[t.producer]
        return sum(xc(t, s, d) for d in {pl[c] for c in t.consumers} - {s})

    for _ in range(max_passes):
        improved = False
        for i in range(prob.n_ops):
            cur = pl[i]
            base = w[i, cur] + sum(tcost(ti) for ti in touching[i])
            for k in allowed:
                if k == cur or not math.isfinite(w[i, k]):
                    continue
                pl[i] = k
                v = w[i, k] + sum(tcost(ti) for ti in touching[i])
                if v < base - 1e-15 * max(1.0, abs(base)):
                    base, cur = v, k
                    improved = True
                else:
                    pl[i] = cur
        if not improved:
            break
    return pl


def _additive_value(prob: PartitionProblem, placement: Sequence[int], objective: str,
                    subset: Sequence[int] | None) -> float:
    """The additive objective of ``subset`` (what the DP minimises) for one placement."""
    w, xc, _ = _weights(prob, objective, subset)
    v = sum(float(w[i, k]) for i, k in enumerate(placement))
    for t in prob.tensors:
        s = placement[t.producer]
        v += sum(xc(t, s, d) for d in {placement[c] for c in t.consumers} - {s})
    return v


def _solve_additive(prob: PartitionProblem, objective: str, subset: Sequence[int] | None,
                    max_states: int) -> tuple[list[int], str, bool]:
    """(placement, method, exact) for latency or energy restricted to ``subset``.

    The frontier DP; if it had to prune, the MILP for small graphs, else the heuristic: local search
    from the beam DP's placement and from every single device able to run the whole graph, keeping
    the best (so the heuristic is never worse than the best single device).
    """
    _, pl, exact = solve_dp(prob, objective, subset=subset, max_states=max_states)
    if exact:
        return pl, "dp", True
    if prob.n_ops <= MILP_MAX_OPS:
        _, pl2, optimal = solve_milp(prob, objective, subset=subset)
        return pl2, "milp", optimal
    allowed = list(range(prob.n_devices)) if subset is None else list(subset)
    starts = [pl] + [[k] * prob.n_ops for k in allowed if np.isfinite(prob.costs.time_s[:, k]).all()]
    found = [_local_search(prob, st, objective, subset) for st in starts]
    best = min(found, key=lambda p: _additive_value(prob, p, objective, subset))
    return best, "beam-dp+local-search", False


# ------------------------------------------------------------------------------------------------
# pipelined throughput


@dataclass(frozen=True)
class Stage:
    """A contiguous range of ops (topological positions ``first..last``) on one device."""

    device: str
    first: int
    last: int
    first_op: str
    last_op: str
    time_s: float

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "first_op": self.first_op, "last_op": self.last_op,
                "ops": self.last - self.first + 1, "time_s": self.time_s}


def _cut_bytes(prob: PartitionProblem) -> np.ndarray:
    """Bytes live across each cut ``k`` (between positions k-1 and k), k = 0..n."""
    n = prob.n_ops
    diff = np.zeros(n + 1)
    for t in prob.tensors:
        a, b = t.producer + 1, t.consumers[-1]  # live across cuts a..b
        if b >= a:
            diff[a] += t.nbytes
            diff[b + 1] -= t.nbytes
    return np.cumsum(diff)[: n + 1]


def solve_pipeline(prob: PartitionProblem) -> tuple[float, list[Stage], list[tuple[int, str, str, float, float]]]:
    """Min-bottleneck pipeline over contiguous stages on distinct devices (exact; module docstring).

    Returns (bottleneck seconds, stages, cut transfers ``(cut, src, dst, time_s, bytes)``).
    """
    c = prob.costs
    n, nd = prob.n_ops, prob.n_devices
    finite = np.isfinite(c.time_s)
    # prefix sums of the finite costs and of the ops a device cannot run (a stage holding one is infinite)
    prefix = np.vstack([np.zeros(nd), np.cumsum(np.where(finite, c.time_s, 0.0), axis=0)])
    bad = np.vstack([np.zeros(nd, dtype=int), np.cumsum(~finite, axis=0)])
    cut = _cut_bytes(prob)
    best: tuple[float, tuple[int, ...], list[int]] | None = None
    idx = np.arange(n + 1)
    upper = idx[:, None] < idx[None, :]
    stages_cache: dict[int, np.ndarray] = {}

    def stage_of(k: int) -> np.ndarray:
        if k not in stages_cache:
            col, badc = prefix[:, k], bad[:, k]
            ok = upper & (badc[:, None] == badc[None, :])
            stages_cache[k] = np.where(ok, col[None, :] - col[:, None], _INF)
        return stages_cache[k]

    for m in range(1, min(nd, n) + 1):
        for seq in itertools.permutations(range(nd), m):
            # f[j]: best bottleneck with stages seq[:s+1] covering positions [0, j)
            f = np.full(n + 1, _INF)
            f[1:] = np.where(bad[1:, seq[0]] == 0, prefix[1:, seq[0]], _INF)  # first stage [0, j)
            arg: list[np.ndarray] = [np.zeros(n + 1, dtype=int)]
            for s in range(1, m):
                a, b = seq[s - 1], seq[s]
                if not prob.linked[a, b]:
                    f = np.full(n + 1, _INF)
                    arg.append(np.zeros(n + 1, dtype=int))
                    continue
                xt = np.where(cut > 0, prob.link_latency_s[a, b] + cut * prob.link_inv_bw[a, b], 0.0)
                base = np.maximum(f, xt)  # bottleneck up to cut i, including the transfer at i
                stage = stage_of(b)  # stage[i, j]: time of positions [i, j) on b (inf if b cannot run one)
                v = np.maximum(base[:, None], stage)
                v[:s, :] = _INF  # the earlier stages need at least one op each
                g = v.min(axis=0)
                ga = v.argmin(axis=0)
                f = g
                arg.append(ga)
            if math.isfinite(f[n]) and (best is None or f[n] < best[0]):
                cuts = [n]
                for s in range(m - 1, 0, -1):
                    cuts.append(int(arg[s][cuts[-1]]))
                best = (float(f[n]), seq, cuts[::-1])
    if best is None:
        raise PartitionError(f"graph {prob.name!r} on node {prob.node!r}: no pipeline; expected at least one device "
                             "able to run every op, or linked devices covering the graph")
    bottleneck, seq, ends = best
    stages: list[Stage] = []
    transfers: list[tuple[int, str, str, float, float]] = []
    start = 0
    for s, end in enumerate(ends):
        d = seq[s]
        t = float(prefix[end, d] - prefix[start, d])
        stages.append(Stage(c.devices[d], start, end - 1, c.ops[start], c.ops[end - 1], t))
        if s + 1 < len(seq):
            b = seq[s + 1]
            by = float(cut[end])
            xt = float(prob.link_latency_s[d, b] + by * prob.link_inv_bw[d, b]) if by > 0 else 0.0
            transfers.append((end, c.devices[d], c.devices[b], xt, by))
        start = end
    return bottleneck, stages, transfers


# ------------------------------------------------------------------------------------------------
# the result and the entry point


@dataclass(frozen=True)
class PartitionResult:
    """A placement of a graph's ops on a node's devices and what it costs (module docstring).

    ``to_json()`` has the keys ``placement`` ({op: device}), ``transfers``, ``latency_s``,
    ``energy_j``, ``best_single_device``, ``best_single_device_latency_s`` and more.
    """

    model: str
    node: str
    objective: str
    method: str
    exact: bool
    placement: dict[str, str]
    transfers: tuple[Transfer, ...]
    latency_s: float
    energy_j: float
    busy_s: dict[str, float]
    best_single_device: str
    best_single_device_latency_s: float
    best_single_device_energy_j: float
    single_device: dict[str, dict[str, float]]
    unsupported: dict[str, dict[str, str]]
    throughput_per_s: float | None = None
    best_single_device_throughput_per_s: float | None = None
    stages: tuple[Stage, ...] = ()
    notes: tuple[str, ...] = ()
    idle: str = "used"
    memory_bytes: dict[str, float] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        """Best single device latency / this placement's latency (throughput ratio for ``throughput``)."""
        if self.objective == "throughput" and self.throughput_per_s and self.best_single_device_throughput_per_s:
            return self.throughput_per_s / self.best_single_device_throughput_per_s
        return self.best_single_device_latency_s / self.latency_s if self.latency_s > 0 else 1.0

    @property
    def energy_ratio(self) -> float:
        """This placement's energy / the best single device's energy."""
        return self.energy_j / self.best_single_device_energy_j if self.best_single_device_energy_j > 0 else 1.0

    def devices_used(self) -> list[str]:
        return sorted(set(self.placement.values()))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model, "node": self.node, "objective": self.objective, "method": self.method,
            "exact": self.exact, "idle": self.idle, "placement": dict(self.placement),
            "memory_bytes": dict(self.memory_bytes),
            "transfers": [t.to_json() for t in self.transfers], "latency_s": self.latency_s,
            "energy_j": self.energy_j, "busy_s": dict(self.busy_s), "devices_used": self.devices_used(),
            "best_single_device": self.best_single_device,
            "best_single_device_latency_s": self.best_single_device_latency_s,
            "best_single_device_energy_j": self.best_single_device_energy_j,
            "speedup": self.speedup, "energy_ratio": self.energy_ratio,
            "single_device": {k: dict(v) for k, v in self.single_device.items()},
            "unsupported": {k: dict(v) for k, v in self.unsupported.items()},
            "notes": list(self.notes),
        }
        if self.objective == "throughput":
            out["throughput_per_s"] = self.throughput_per_s
            out["best_single_device_throughput_per_s"] = self.best_single_device_throughput_per_s
            out["stages"] = [s.to_json() for s in self.stages]
        return _finite(out)


def _resident_memory(graph: OpGraph, node: NodeSpec, placement: dict[str, str]) -> tuple[dict[str, float], list[str]]:
    """Bytes of weights and caches (graph inputs that are not activations) each device holds, and a note per
    device (or shared-memory pool) whose main memory they exceed. Placement is not constrained by it."""
    from workloads.ir import Role

    held: dict[str, set[str]] = {}
    for op in graph:
        dev = placement[op.name]
        for t in op.inputs:
            if t.role is not Role.ACTIVATION and graph.producer(t.name) is None:
                held.setdefault(dev, set()).add(t.name)
    sizes = {d: float(sum(graph.tensors[t].nbytes for t in names)) for d, names in held.items()}
    shared = tuple(d for d in node.shared_memory if d in held)
    pools = [shared] if shared else []
    pools += [(d,) for d in held if d not in shared]
    notes: list[str] = []
    for pool in pools:
        nbytes = float(sum(graph.tensors[t].nbytes for t in set().union(*(held[d] for d in pool))))
        dev = node.device(pool[0]).device
        cap = dev.main_memory.usable
        if nbytes > cap:
            notes.append(f"memory: {'+'.join(pool)} hold {nbytes / 2**30:.2f} GiB of weights and caches, more than the "
                         f"{cap / 2**30:.2f} GiB of {dev.name} (not a constraint of the placement)")
    return sizes, notes


def _finite(v: Any) -> Any:
    """JSON-safe values: a non-finite float (no single-device baseline) becomes None."""
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _single_devices(prob: PartitionProblem, idle: str = "used") -> dict[str, dict[str, float]]:
    c = prob.costs
    out: dict[str, dict[str, float]] = {}
    for k, d in enumerate(c.devices):
        if np.isfinite(c.time_s[:, k]).all():
            ev = evaluate_placement(prob, [k] * prob.n_ops, idle)
            out[d] = {"latency_s": ev["latency_s"], "energy_j": ev["energy_j"]}
    return out


def partition(graph: OpGraph, node: NodeSpec, objective: str = "latency", *,
              max_states: int = DEFAULT_MAX_STATES, costs: CostTable | None = None,
              cuda_graphs: bool = False, idle: str = "used", profile: Any = None) -> PartitionResult:
    """Place the ops of ``graph`` on the devices of ``node`` to minimise latency or energy, or to
    maximise pipelined throughput (see the module docstring for the model and what is exact).

    Raises
    ------
    PartitionError
        Unknown objective; an op no device can run; no feasible placement over the node's links.
    """
    check_objective(objective)
    if idle not in IDLE_POLICIES:
        raise PartitionError(f"--idle: unknown policy; got {idle!r}; expected one of {', '.join(IDLE_POLICIES)}"
                             f"{did_you_mean(str(idle), IDLE_POLICIES)}")
    prob = build_problem(graph, node, costs or cost_table(graph, node, cuda_graphs=cuda_graphs, profile=profile))
    c = prob.costs
    singles = _single_devices(prob, idle)
    unsupported: dict[str, dict[str, str]] = {}
    for (op, dev), why in sorted(c.reasons.items()):
        unsupported.setdefault(dev, {})[op] = why
    notes = list(c.notes)
    for dev, ops in unsupported.items():
        notes.append(f"{dev}: {len(ops)} op(s) cannot run there and were not placed there (e.g. "
                     f"{next(iter(ops))!r}: {next(iter(ops.values()))})")
    if objective == "throughput":
        return _partition_throughput(graph, node, prob, singles, unsupported, notes, idle)


    if objective == "latency":
        pl, method, exact = _solve_additive(prob, "latency", None, max_states)
    elif idle == "all":  # the idle term is the same for every placement's device set: one additive problem
        pl, method, exact = _solve_additive(prob, "energy", None, max_states)
    else:
        pl, method, exact = _min_energy_over_subsets(graph, node, prob, idle, max_states)
    ev = evaluate_placement(prob, pl, idle)
    key = "latency_s" if objective == "latency" else "energy_j"
    if singles:
        best_name = min(singles, key=lambda d: singles[d][key])
        b_lat, b_e = singles[best_name]["latency_s"], singles[best_name]["energy_j"]
    else:
        best_name, b_lat, b_e = "", _INF, _INF
        notes.append("no single device can run every op: there is no single-device baseline")
    placement = {c.ops[i]: c.devices[k] for i, k in enumerate(pl)}
    mem, mem_notes = _resident_memory(graph, node, placement)
    return PartitionResult(
        model=graph.name, node=node.name, objective=objective, method=method, exact=exact,
        placement=placement, transfers=tuple(ev["transfers"]),
        latency_s=ev["latency_s"], energy_j=ev["energy_j"],
        busy_s={c.devices[k]: float(ev["busy_s"][k]) for k in range(prob.n_devices) if ev["busy_s"][k] > 0},
        best_single_device=best_name, best_single_device_latency_s=b_lat, best_single_device_energy_j=b_e,
        single_device=singles, unsupported=unsupported, notes=tuple(notes + mem_notes), idle=idle, memory_bytes=mem)


def _partition_throughput(graph: OpGraph, node: NodeSpec, prob: PartitionProblem, singles: dict[str, dict[str, float]],
                          unsupported: dict[str, dict[str, str]], notes: list[str], idle: str) -> PartitionResult:
    """The throughput objective of :func:`partition`: the best pipeline, never worse than one device."""
    objective = "throughput"
    c = prob.costs
    bottleneck, stages, cuts = solve_pipeline(prob)
    pl = [0] * prob.n_ops
    for st in stages:
        k = c.devices.index(st.device)
        for i in range(st.first, st.last + 1):
            pl[i] = k
    transfers = tuple(Transfer(f"cut before {c.ops[cut]!r}", a, b, by, xt, by * float(
        prob.link_energy_j_per_byte[c.devices.index(a), c.devices.index(b)])) for cut, a, b, xt, by in cuts)
    latency = sum(s.time_s for s in stages) + sum(t.time_s for t in transfers)
    used = sorted({c.devices.index(s.device) for s in stages})
    dyn = sum(float(c.dynamic_energy_j[i, k]) for i, k in enumerate(pl))
    powered = used if idle == "used" else range(prob.n_devices)
    energy = dyn + sum(t.energy_j for t in transfers) + float(sum(c.idle_w[k] for k in powered)) * bottleneck
    busy = {s.device: s.time_s for s in stages}
    method, exact = "pipeline-dp", True
    thr = 1.0 / bottleneck if bottleneck > 0 else _INF
    if singles:
        best_name = min(singles, key=lambda d: singles[d]["latency_s"])
        b_lat, b_e = singles[best_name]["latency_s"], singles[best_name]["energy_j"]
        best_thr = 1.0 / b_lat
    else:
        best_name, b_lat, b_e, best_thr = "", _INF, _INF, 0.0
        notes.append("no single device can run every op: there is no single-device baseline")
    if thr < best_thr:  # one stage on the best device is a pipeline too; never worse than it
        k = c.devices.index(best_name)
        pl = [k] * prob.n_ops
        stages = [Stage(best_name, 0, prob.n_ops - 1, c.ops[0], c.ops[-1], singles[best_name]["latency_s"])]
        transfers, latency, energy = (), singles[best_name]["latency_s"], singles[best_name]["energy_j"]
        busy, thr = {best_name: latency}, best_thr
    placement = {c.ops[i]: c.devices[k] for i, k in enumerate(pl)}
    mem, mem_notes = _resident_memory(graph, node, placement)
    return PartitionResult(
        model=graph.name, node=node.name, objective=objective, method=method, exact=exact,
        placement=placement, transfers=tuple(transfers),
        latency_s=latency, energy_j=energy, busy_s=busy, best_single_device=best_name,
        best_single_device_latency_s=b_lat, best_single_device_energy_j=b_e, single_device=singles,
        unsupported=unsupported, throughput_per_s=thr, best_single_device_throughput_per_s=best_thr,
        stages=tuple(stages), notes=tuple(notes + mem_notes), idle=idle, memory_bytes=mem)


def _min_energy_over_subsets(graph: OpGraph, node: NodeSpec, prob: PartitionProblem, idle: str,
                             max_states: int) -> tuple[list[int], str, bool]:
    """The least-energy placement over every device subset (only the subset's devices powered)."""
    c = prob.costs
    best_pl, best_val, method, exact = None, _INF, "", True
    for r in range(1, prob.n_devices + 1):
        for subset in itertools.combinations(range(prob.n_devices), r):
            if r == 1:
                k = subset[0]
                if not np.isfinite(c.time_s[:, k]).all():
                    continue
                cand, m, ex = [k] * prob.n_ops, "dp", True
            else:
                try:
                    cand, m, ex = _solve_additive(prob, "energy", subset, max_states)
                except PartitionError:
                    continue
            v = evaluate_placement(prob, cand, idle)["energy_j"]
            exact = exact and ex
            if v < best_val:
                best_pl, best_val, method = cand, v, m
    if best_pl is None:
        raise PartitionError(f"graph {graph.name!r} on node {node.name!r}: no feasible placement; expected links "
                             "between the devices that must exchange tensors")
    return best_pl, method, exact

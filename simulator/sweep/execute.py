"""Run an experiment's points on a local process pool, threads or a Dask cluster, into a resumable store.

The main process plans: it lists the points, builds each distinct workload's graph once to key the
points, asks the store which keys it already holds, and cuts the missing points into tasks. A task
is a group of points that share workload, base hardware and options, so they differ only in
hardware numbers: a worker builds the graph once and costs every point of the task with one
:func:`simulator.engines.vectorized.evaluate_variants` call (the component models broadcast over the
varied spec fields). Systolic tasks are one broadcast :func:`hwmodels.systolic.gemm_cycles` call
over geometries x layers. Only the main process writes, one transaction per finished task, so a
sweep killed at any moment keeps every finished task and resumes with the rest.

Point keys
----------
A point's key is the SHA-256 of its resolved inputs: the graph's digest (so a parameter left at the
model's default and the same value given explicitly are one point), the base spec's digest (a
changed catalog file is a new point), the hardware overrides that differ from the base value, and
every evaluation option with its default filled in. Adding an axis whose values include the old
setting therefore finds the points already computed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from nodeperf.errors import NodeperfError
from simulator.sweep.experiment import (
    COST_METRICS,
    PLAN_KEYS,
    Experiment,
    _resolve_file,
    load_experiment,
)
from simulator.sweep.store import STORE_SCHEMA, open_store

__all__ = ["SweepError", "SweepInterrupted", "SweepSummary", "run_sweep", "plan_sweep", "run_task", "point_key",
           "graph_key_job", "exit_with_parent", "DASK_CONNECT_TIMEOUT_S", "DASK_WORKER_TIMEOUT_S",
           "COMMIT_INTERVAL_S", "MODEL_TASK_POINTS", "SYSTOLIC_TASK_POINTS"]

logger = logging.getLogger(__name__)

#: Seconds to wait for a Dask scheduler to answer before giving up (an unreachable address fails fast).
DASK_CONNECT_TIMEOUT_S = 10.0
#: Seconds a Dask sweep waits with tasks left and no worker in the cluster before it stops (resumable).
DASK_WORKER_TIMEOUT_S = 60.0
#: Points per task of a model sweep (one vectorised call each; also the granularity of resuming).
MODEL_TASK_POINTS = 512
#: Seconds between commits of finished tasks to the store (a killed sweep loses at most this much work).
COMMIT_INTERVAL_S = 1.0
#: Points per task of a systolic sweep.
SYSTOLIC_TASK_POINTS = 20_000


class SweepError(NodeperfError, ValueError):
    """A sweep cannot run: bad scheduler address or worker count, unreachable cluster, missing extra."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep; ``message`` says what the store holds and how to go on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class SweepSummary:
    """What a :func:`run_sweep` call did.

    Attributes
    ----------
    out
        The store written.
    total
        Points of the experiment after filters (distinct inputs).
    computed
        Points evaluated by this call (including those stored with an error).
    reused
        Points found in the store already.
    errors
        Points of this experiment whose evaluation failed with a user error (stored with the message).
    filtered
        Points the filters removed.
    seconds
        Wall-clock time of the call.
    scheduler, workers
        Where it ran (for Dask, the workers the scheduler had at the end).
    """

    out: str
    total: int
    computed: int
    reused: int
    errors: int
    filtered: int
    seconds: float
    scheduler: str
    workers: int

    def line(self) -> str:
        rate = self.computed / self.seconds if self.seconds > 0 else 0.0
        err = f", {self.errors} with errors (see the error column)" if self.errors else ""
        filt = f", {self.filtered} filtered out" if self.filtered else ""
        return (f"{self.total} points: {self.computed} computed, {self.reused} reused from {self.out}{err}{filt}; "
                f"{self.seconds:.1f} s ({rate:,.0f} points/s, {self.scheduler}, {self.workers} worker(s))")


# ------------------------------------------------------------------------------------------------
# keys


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def point_key(inputs: Mapping[str, Any]) -> str:
    """SHA-256 of a point's resolved inputs (canonical JSON, store schema included)."""
    return hashlib.sha256(_canon({"store": STORE_SCHEMA, **inputs}).encode()).hexdigest()


def _num_key(v: Any) -> Any:
    """A value as it enters a key: floats by their shortest round-trip repr, ints as ints."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


# ------------------------------------------------------------------------------------------------
# options and workloads (shared by planner and workers)


def _eval_options(options: Mapping[str, Any], calibration_id: str = "") -> Any:
    from simulator.engines.options import SETTINGS, options_from_settings

    plan = None
    plan_kw = {k: v for k, v in options.items() if k in PLAN_KEYS}
    if "offload" in plan_kw:  # "none" or comma-separated targets -> the plan's tuple
        plan_kw["offload"] = tuple(t for t in str(plan_kw["offload"]).split(",") if t and t != "none")
    if plan_kw:
        from workloads.parallel import ParallelPlan

        plan = ParallelPlan(**plan_kw)
    engine = {k: v for k, v in options.items() if k in SETTINGS}  # (engine and streams pick the engine)
    return options_from_settings(engine, calibration_id=calibration_id, plan=plan)


#: EvalOptions fields added after sweep stores were keyed on the options, each with the value at which it is
#: left out of a point's key (its default), so points stored before it keep their keys
_KEYED_SINCE_ADDED: dict[str, Any] = {
    "eager_modules": False, "epilogue_fusion": True, "gemv_generated": False, "norm_fusion": False,
    "conv_layout": "nhwc", "fp8_activation_scale": "dynamic", "fp8_accumulation": "fast", "all_reduce_kernel": "nccl",
    "decode_attention": "grouped", "warm_repeats": False, "streaming_kernel": "", "tpu_flash_2023": False,
    "tpu_segment_ids": False, "fused_moe_configs": (), "kernel_time_only": False}


def _options_identity(options: Mapping[str, Any]) -> dict[str, Any]:
    opts = _eval_options(options)
    d = dataclasses.asdict(opts)
    d.pop("calibration_id")
    for name, default in _KEYED_SINCE_ADDED.items():  # added later: at their default, stored points keep keys
        if d[name] == default:
            d.pop(name)
    engine = options.get("engine", "analytical")
    return {"engine": engine, "streams": options.get("streams", 1) if engine == "des" else None, **d}


@lru_cache(maxsize=128)
def _graph(workload_json: str, base_dir: str) -> Any:
    from workloads.resolve import load_workload

    w = json.loads(workload_json)
    model = _resolve_file(w.pop("model"), Path(base_dir))
    fp8 = w.pop("fp8_linears", None)
    g = load_workload(model, **w)
    if fp8 is None:
        return g
    if not w.get("train"):
        raise ValueError(f"workload.fp8_linears: {fp8!r} is a training recipe; got train false; expected train = true "
                         "(as predict --fp8-linears needs --train)")
    from workloads.ir import OpGraph

    return OpGraph(g.name, g.ops, {**g.meta, "fp8_linears": fp8})  # evaluate_graph_with_plan applies it


@lru_cache(maxsize=16)
def _hardware(name: str, calibration: str | None) -> Any:
    from simulator.hardware import load_hardware

    return load_hardware(name, calibration)


def _calibration_id(path: str | None) -> str:
    if not path:
        return ""
    p = Path(path)
    return f"{p.name}:sha256:{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}"


def _items_per_run(meta: Mapping[str, Any]) -> float:
    """Tokens (batch x seq) of a sequence model, samples (batch) of a vision model or a graph without a sequence."""
    batch = meta.get("batch") or 1
    if "image_size" not in meta and meta.get("seq"):
        return float(batch) * float(meta["seq"])
    return float(batch)


# ------------------------------------------------------------------------------------------------
# workers


def run_task(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Evaluate one task (a group of points); returns one row (metrics, provenance, error) per point.

    Runs in a worker process, a thread or a Dask worker; pure apart from module caches.
    """
    if task["kind"] == "systolic":
        return _systolic_task(task)
    return _model_task(task)


def _user_error(exc: BaseException) -> str:
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return str(msg).splitlines()[0] if str(msg) else type(exc).__name__


_USER_ERRORS = (ValueError, KeyError, NotImplementedError, ZeroDivisionError, OverflowError)


def _model_task(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of a model task; its cost metrics (:data:`COST_METRICS`) priced from each row's latency,
    energy and throughput by :func:`_priced_rows`."""
    asked = [m for m in task["metrics"] if m in COST_METRICS]
    if not asked:
        return _model_rows(task)
    need = ("latency_s", "energy_j", "throughput_per_s")
    base = [m for m in task["metrics"] if m not in COST_METRICS]
    rows = _model_rows({**task, "metrics": base + [m for m in need if m not in base]})
    return _priced_rows(rows, task, asked)


def _priced_rows(rows: list[dict[str, Any]], task: Mapping[str, Any], asked: Sequence[str]) -> list[dict[str, Any]]:
    """``usd_per_hour`` and ``usd_per_million_items`` of each row: its devices (the plan's tp x pp x dp x cp)
    for its latency, priced by :func:`hwmodels.cost.run_cost` with the task's cost settings (power in TCO mode:
    the row's energy over its device-seconds); a device without the price the mode needs makes an error row."""
    from hwmodels.cost import Pricing, load_price_entries, run_cost
    from simulator.engines.analytical import spec_of

    c, o = dict(task.get("cost") or {}), task["options"]
    if c.get("prices"):  # relative to the experiment file, as its other files
        c["prices"] = str(_resolve_file(c["prices"], Path(task["base_dir"])))
    pricing = Pricing(str(c.get("mode", "cloud")), c.get("years"), c.get("pue"), c.get("usd_per_kwh"),
                      float(c.get("utilization", 1.0)), c.get("prices"))
    devices = math.prod(int(o.get(k, 1)) for k in ("tp", "pp", "dp", "cp"))
    try:
        device = str(spec_of(_hardware(task["hardware"], task.get("calibration")))[0].name)
        table = load_price_entries(pricing.prices)
    except _USER_ERRORS as exc:
        return [{**r, "error": r.get("error") or _user_error(exc)} for r in rows]
    for r in rows:
        if r.get("error"):
            continue
        items = r["throughput_per_s"] * r["latency_s"]
        try:
            got = run_cost(device, devices, r["latency_s"], items, energy_j=r["energy_j"], pricing=pricing, table=table)
        except _USER_ERRORS as exc:
            r["error"] = f"cost: {_user_error(exc)}"
            continue
        if got.get("usd_per_device_hour") is None:
            r["error"] = f"cost: {got['priced_by']}; expected a [devices.{device.lower()}] usd_per_hour entry"
            continue
        values = {"usd_per_hour": got["usd_per_device_hour"] * devices,
                  "usd_per_million_items": got["usd_per_million_tokens"]}
        r.update({m: values[m] for m in asked})
    return rows


def _model_rows(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    from hwmodels.paths import with_overrides

    points: list[tuple[str, dict[str, Any]]] = task["points"]
    metrics = task["metrics"]
    try:
        graph = _graph(_canon(task["workload"]), task["base_dir"])
        base = _hardware(task["hardware"], task.get("calibration"))
        opts = _eval_options(task["options"], _calibration_id(task.get("calibration")))
    except _USER_ERRORS as exc:
        msg = _user_error(exc)
        return [{"point_key": k, "error": msg} for k, _ in points]
    engine = task["options"].get("engine", "analytical")
    w = task["workload"]
    if graph.meta.get("fp8_linears") and opts.plan is None:  # a recipe is built by the plan path: one device
        from workloads.parallel import ParallelPlan

        opts = dataclasses.replace(opts, plan=ParallelPlan(microbatch=int(w.get("batch") or 1)))
    elif opts.plan is not None and w.get("train") and w.get("batch") is not None:
        msg = (f"workload.batch: got {w['batch']} for a training step under a parallel plan; expected options.microbatch "
               "(sequences per data-parallel rank and microbatch) and options.global_batch (predict refuses --batch "
               "with --train and a plan likewise)")
        return [{"point_key": k, "error": msg} for k, _ in points]
    if engine == "des" and opts.plan is not None:
        msg = ("options: engine 'des' with a parallel plan; got a plan (tp/pp/dp/...) for the discrete-event engine; "
               "expected engine = \"analytical\" for multi-device plans (nodeperf predict does the same)")
        return [{"point_key": k, "error": msg} for k, _ in points]
    if engine == "analytical" and opts.plan is None:
        rows = _model_vectorized(graph, base, opts, points, metrics)
        if rows is not None:
            return rows
    out = []
    for key, ov in points:
        try:
            spec = with_overrides(base, ov, source=task["source"])
            if engine == "des":
                from simulator.engines.discrete_event import simulate

                report = simulate(graph, spec, opts, streams=int(task["options"].get("streams", 1)))
            else:
                from simulator.front import evaluate  # (routes a parallel plan)

                report = evaluate(graph, spec, opts)
        except _USER_ERRORS as exc:
            out.append({"point_key": key, "error": _user_error(exc)})
            continue
        t = report.totals
        values = {"latency_s": t.latency_s, "energy_j": t.energy_j,
                  "throughput_per_s": _items_per_run(graph.meta) / t.latency_s if t.latency_s > 0 else None,
                  "memory_bytes": float(report.memory.required_bytes) if report.memory is not None else None,
                  "power_w": t.avg_power_w}
        out.append(_metric_row(key, _prov_hash(report.provenance), values, metrics))
    return out


def _metric_row(key: str, prov: str, values: Mapping[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    """A stored row; a metric that is not a finite number makes it an error row that says which."""
    row: dict[str, Any] = {"point_key": key, "provenance_sha256": prov}
    bad = []
    for m in metrics:
        v = values[m]
        f = None if v is None else float(v)
        if f is None or not math.isfinite(f):
            bad.append(f"{m} = {v!r}")
            f = None
        row[m] = f
    if bad:
        row["error"] = f"metrics: not finite; got {', '.join(bad)}; expected finite numbers (a zero latency?)"
    return row


def _prov_hash(prov: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canon(prov).encode()).hexdigest()


def _model_vectorized(graph: Any, base: Any, opts: Any, points: Sequence[tuple[str, dict[str, Any]]],
                      metrics: Sequence[str]) -> list[dict[str, Any]] | None:
    """All points in one :func:`evaluate_variants` call; None when it fails (the per-point loop then
    locates the failing points)."""
    import numpy as np

    from hwmodels.paths import get_path, resolve_path
    from simulator.engines.analytical import provenance
    from simulator.engines.vectorized import evaluate_variants

    paths = sorted({p for _, ov in points for p in ov})
    base_vals = {p: float(get_path(base, p)) for p in paths}
    cols = {p: np.array([float(ov.get(p, base_vals[p])) for _, ov in points]) for p in paths}
    try:
        res = evaluate_variants(graph, base, cols, opts)
    except _USER_ERRORS as exc:
        logger.info("vectorised evaluation failed (%s); evaluating point by point", _user_error(exc))
        return None
    prov_base = provenance(graph, base, opts, spec_sha256="")  # each point's spec digest below
    items = _items_per_run(graph.meta)
    digests = _VariantDigests(base, {p: resolve_path(base, p) for p in paths})
    out = []
    for i, (key, ov) in enumerate(points):
        lat = float(res.latency_s[i])
        values = {"latency_s": lat, "energy_j": float(res.energy_j[i]),
                  "throughput_per_s": items / lat if lat > 0 else None,
                  "memory_bytes": float(res.memory_bytes[i]), "power_w": float(res.power_w[i])}
        prov = {**prov_base, "spec_sha256": digests.of(ov)}
        out.append(_metric_row(key, _prov_hash(prov), values, metrics))
    return out


class _VariantDigests:
    """:func:`simulator.engines.analytical.spec_digest` of base-plus-overrides variants, without building
    each variant: the base's field tree is stripped once and each override is written into it (and
    restored) before hashing, which gives the digest of ``with_overrides(base, overrides)``."""

    def __init__(self, base: Any, full_paths: Mapping[str, str]) -> None:
        self.base = base
        self.full = dict(full_paths)
        from simulator.engines.analytical import digest_tree

        self.tree = digest_tree(base)  # the tree spec_digest hashes

    def _slot(self, full: str) -> tuple[Any, Any, Any]:
        """(container in the stripped tree, key or index, value type of the real field)."""
        obj, node = self.base, self.tree
        parts = full.split(".")
        for i, part in enumerate(parts):
            if isinstance(obj, tuple):
                j = next(n for n, x in enumerate(obj) if getattr(x, "name", None) == part)
                key, child = j, obj[j]
            elif isinstance(obj, dict):
                key, child = part, obj[part]
            else:
                key, child = part, getattr(obj, part)
            if i == len(parts) - 1:
                return node, key, type(child)
            obj, node = child, node[key]
        raise AssertionError(full)  # pragma: no cover

    def of(self, overrides: Mapping[str, Any]) -> str:
        """The digest with ``overrides`` written into the tree: a field at its "absent" value is taken out
        of it, and one the base leaves out (at that value) is put in, as :func:`spec_tree` does."""
        from simulator.engines.analytical import absent_in_digest

        saved = []
        for p, v in overrides.items():
            node, key, typ = self._slot(self.full[p])
            value = int(v) if typ is int else float(v)
            saved.append((node, key, node.get(key, _LEFT_OUT) if isinstance(node, dict) else node[key]))
            if isinstance(node, dict) and absent_in_digest(key, value):
                node.pop(key, None)
            else:
                node[key] = value
        try:
            text = json.dumps(self.tree, sort_keys=True, separators=(",", ":"), default=repr)
        finally:
            for node, key, old in reversed(saved):
                if old is _LEFT_OUT:
                    node.pop(key, None)
                else:
                    node[key] = old
        return hashlib.sha256(text.encode()).hexdigest()


_LEFT_OUT = object()  # a field the digest tree leaves out


_DIGESTS: dict[int, tuple[Any, str]] = {}


def graph_digest_cached(graph: Any) -> str:
    """:func:`simulator.engines.analytical.graph_digest`, computed once per graph object."""
    from simulator.engines.analytical import graph_digest, identity_cached

    return identity_cached(_DIGESTS, graph, graph_digest, 256)


@lru_cache(maxsize=32)
def _layers(source_json: str) -> Any:
    """The array layers of a systolic source: ``{"topology": path}`` or ``{"workload": {...}, "base_dir": ...}``."""
    from simulator.sweep.systolic import network_layers

    src = json.loads(source_json)
    if "topology" in src:
        return network_layers(src["topology"])
    return network_layers(_graph(_canon(src["workload"]), src["base_dir"]))


def _layers_digest(lay: Any) -> str:
    arrays = {k: [int(x) for x in getattr(lay, k)] for k in ("m", "n", "k", "ifmap_words", "repeat")}
    return hashlib.sha256(_canon({"names": list(lay.names), **arrays}).encode()).hexdigest()


@lru_cache(maxsize=1)
def _energy_digest() -> str:
    """SHA-256 of the systolic energy coefficients file (a changed coefficient is a new point)."""
    from hwmodels.systolic import DEFAULT_ENERGY_FILE

    return hashlib.sha256(DEFAULT_ENERGY_FILE.read_bytes()).hexdigest()


def _systolic_task(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One broadcast gemm_cycles call: points (rows) x layers (columns), or one layer per point.

    A layer that runs ``repeat`` times back to back (conv groups, batched matmuls) counts ``repeat``
    times in every summed figure.
    """
    import numpy as np

    from hwmodels.systolic import gemm_cycles

    lay = _layers(task["layers"])
    arr = {"m": lay.m, "n": lay.n, "k": lay.k, "ifmap_words": lay.ifmap_words, "repeat": lay.repeat}
    pts = task["points"]  # (key, {rows, cols, sram_words|None, dram|None, layer|None})
    metrics = task["metrics"]
    word_bytes = int(task["word_bytes"])
    clock = task.get("clock_hz")
    rows = np.array([p["rows"] for _, p in pts], dtype=np.int64)
    cols = np.array([p["cols"] for _, p in pts], dtype=np.int64)
    per_layer = pts[0][1].get("layer") is not None
    if per_layer:
        idx = np.array([p["layer"] for _, p in pts], dtype=np.int64)
        m, n, k, ifw, rep = (arr[x][idx] for x in ("m", "n", "k", "ifmap_words", "repeat"))
        shape_pt: tuple[int, ...] = (len(pts),)
    else:
        m, n, k, ifw, rep = (arr[x][None, :] for x in ("m", "n", "k", "ifmap_words", "repeat"))
        shape_pt = (len(pts), 1)
    rows, cols = rows.reshape(shape_pt), cols.reshape(shape_pt)
    sram = None
    if pts[0][1]["sram_words"] is not None:
        sram = tuple(np.array([p["sram_words"][j] for _, p in pts], dtype=np.int64).reshape(shape_pt)
                     for j in range(3))
    dram = None
    if pts[0][1]["dram"] is not None:
        dram = np.array([p["dram"] for _, p in pts], dtype=np.float64).reshape(shape_pt)
    r = gemm_cycles(rows, cols, task["dataflow"], m, n, k, ifmap_words=ifw, sram_words=sram,
                    dram_words_per_cycle=dram, fold_average="exact")
    energy = None
    if "energy_j" in metrics:
        from hwmodels.systolic import operand_words, systolic_energy

        # one chip runs every layer: unbounded scratchpads are priced at the network's largest whole operands
        whole = tuple(int(np.max(w)) * word_bytes
                      for w in operand_words(lay.m, lay.n, lay.k, lay.ifmap_words))
        sram_bytes = whole if sram is None else tuple(w * word_bytes for w in sram)
        energy = systolic_energy(r, dtype=task["dtype"], sram_bytes=sram_bytes, word_bytes=word_bytes,  # type: ignore[arg-type]
                                 clock_hz=clock)

    def total(x: Any) -> np.ndarray:
        a = np.asarray(x)
        a = a * (rep.astype(object) if a.dtype == object else rep)
        if a.dtype == object:
            a = a.astype(float)
        return a if per_layer else a.sum(axis=1)

    cycles = total(r.total_cycles)
    macs = total(r.macs)
    parts = [np.asarray(x) for x in (r.dram_ifmap_reads, r.dram_filter_reads, r.dram_ofmap_writes, r.dram_ofmap_reads)]
    if any(x.dtype == object for x in parts):
        parts = [x.astype(object) for x in parts]
    dram_words = total(parts[0] + parts[1] + parts[2] + parts[3])
    pe = (rows * cols).reshape(-1).astype(float)
    values = {
        "cycles": cycles.astype(float),
        "compute_cycles": total(r.compute_cycles).astype(float),
        "stall_cycles": total(r.stall_cycles).astype(float),
        "utilisation": np.asarray(macs, dtype=float) / (np.maximum(cycles.astype(float), 1.0) * pe),
        "dram_bytes": np.asarray(dram_words, dtype=float) * word_bytes,
        "latency_s": cycles.astype(float) / clock if clock else None,
        "energy_j": None if energy is None else total(energy.energy_j),
    }
    prov_base = {"model": "hwmodels.systolic.gemm_cycles", "fold_average": "exact",
                 "layers_sha256": task["layers_sha256"], "word_bytes": word_bytes, "clock_hz": clock,
                 "dataflow": task["dataflow"], "dtype": task["dtype"], "energy_sha256": _energy_digest()}
    out = []
    for i, (key, p) in enumerate(pts):
        vals = {m: (None if values[m] is None else values[m][i]) for m in metrics}
        out.append(_metric_row(key, _prov_hash({**prov_base, **p}), vals, metrics))
    return out


# ------------------------------------------------------------------------------------------------
# planning


@dataclass
class _Plan:
    experiment: Experiment
    rows: dict[str, dict[str, Any]]  # point_key -> axis columns
    tasks: list[dict[str, Any]]  # every point's task (before subtracting the store)
    errors: list[dict[str, Any]]  # rows failed at planning (bad workload combinations)
    filtered: int
    extra_axes: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # columns besides the axes


def plan_sweep(exp: Experiment, resolve: GraphResolver | None = None, *, progress: bool | None = None) -> _Plan:
    """Points, their keys and their tasks (nothing evaluated, nothing written).

    ``resolve(workload JSONs, base folder)`` keys the distinct workloads of a model experiment
    (``{workload JSON: ("ok", graph digest) | ("error", message)}``); default: one after another
    in this process (:func:`run_sweep` passes one that uses its worker pool and the store's cache).
    ``progress``: bars while the points are listed and keyed (see
    :func:`simulator.report.progress.progress_enabled`).
    """
    if exp.kind == "systolic":
        return _plan_systolic(exp, progress)
    return _plan_model(exp, resolve, progress)


GraphResolver = Callable[[Sequence[str], str], Mapping[str, tuple[str, str]]]


def _resolve_graphs_serial(workloads: Sequence[str], base_dir: str) -> dict[str, tuple[str, str]]:
    """``{workload JSON: ("ok", graph digest) | ("error", message)}``, one graph after another."""
    return {wj: graph_key_job((wj, base_dir))[1] for wj in workloads}


def graph_key_job(item: tuple[str, str]) -> tuple[str, tuple[str, str]]:
    """Build one workload's graph and digest it (a planning task run by a worker).

    ``item`` is ``(workload JSON, base folder)``; returns ``(workload JSON, ("ok", digest))`` or
    ``(workload JSON, ("error", located message))``.
    """
    wj, base_dir = item
    try:
        return wj, ("ok", graph_digest_cached(_graph(wj, base_dir)))
    except _USER_ERRORS as exc:
        return wj, ("error", _user_error(exc))


class _Settings:
    """A point's workload, options, hardware file and spec overrides, with the canonical JSON of each part
    memoised by the axis values it depends on (planning a million points spends its time on keys, not on
    re-encoding the same workload)."""

    def __init__(self, exp: Experiment, fixed_w: Mapping[str, Any], fixed_o: Mapping[str, Any],
                 hw_name: Any) -> None:
        self.fixed_w, self.fixed_o, self.hw_name = dict(fixed_w), dict(fixed_o), hw_name
        self.base_dir = exp.base_dir
        self.w_axes = [(a.name, a.key) for a in exp.axes if a.section == "workload"]
        self.o_axes = [(a.name, a.key) for a in exp.axes if a.section == "options"]
        self.hw_axis = next((a.name for a in exp.axes if a.section == "hardware" and a.key == "name"), None)
        self.ov_axes = [(a.name, a.key) for a in exp.axes if a.section == "hardware" and a.key != "name"]
        self.fixed_c = dict(exp.fixed.get("cost", {}))
        self.c_axes = [(a.name, a.key) for a in exp.axes if a.section == "cost"]
        self._memo: dict[Any, tuple[dict[str, Any], str]] = {}
        self._hw: dict[Any, str] = {}

    def _part(self, tag: str, fixed: Mapping[str, Any], axes: Sequence[tuple[str, str]],
              point: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        # (type, value) pairs: 1 and 1.0 are one dict key but two canonical JSONs
        memo_key: Any = (tag, *((type(point[n]), point[n]) for n, _ in axes))
        try:
            hit = self._memo.get(memo_key)
        except TypeError:  # an unhashable axis value: no memo
            memo_key, hit = None, None
        if hit is None:
            d = {**fixed, **{k: point[n] for n, k in axes}}
            hit = (d, _canon(d))
            if memo_key is not None:
                self._memo[memo_key] = hit
        return hit

    def workload(self, point: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """(workload settings, their canonical JSON)."""
        return self._part("w", self.fixed_w, self.w_axes, point)

    def options(self, point: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """(option settings, their canonical JSON)."""
        return self._part("o", self.fixed_o, self.o_axes, point)

    def cost(self, point: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """(cost settings, their canonical JSON): ``{}`` and ``""`` for the default (cloud, the catalog's
        prices), which is then left out of the point key (a store's keys do not move with it)."""
        d, cj = self._part("c", self.fixed_c, self.c_axes, point)
        if not d or d == {"mode": "cloud"}:
            return {}, ""
        return d, cj

    def hardware(self, point: Mapping[str, Any]) -> str:
        """The resolved hardware name or file of the point."""
        name = point[self.hw_axis] if self.hw_axis is not None else self.hw_name
        try:
            return self._hw[name]
        except KeyError:
            self._hw[name] = hw = str(_resolve_file(name, self.base_dir))
            return hw
        except TypeError:
            return str(_resolve_file(name, self.base_dir))

    def overrides(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """``{spec path as written: value}`` of the point's hardware axes."""
        return {k: point[n] for n, k in self.ov_axes}


#: Points between updates of a planning progress bar.
_PLAN_TICK = 4096


def _listed_workloads(exp: Experiment, settings: _Settings, progress: bool | None) -> list[str]:
    """The distinct workloads (canonical JSON) of the points that pass the filters, in first-seen order."""
    if not settings.w_axes and not exp.filters:
        return [settings.workload({})[1]]
    from simulator.report.progress import progress_bar

    distinct: dict[str, None] = {}
    with progress_bar(exp.size, desc=f"{exp.name}: planning: listing workloads", unit="pt", enabled=progress,
                      leave=False) as bar:
        for i, point in enumerate(exp.points(), 1):
            distinct.setdefault(settings.workload(point)[1])
            if i % _PLAN_TICK == 0:
                bar.update(_PLAN_TICK)
    return list(distinct)


def _plan_model(exp: Experiment, resolve: GraphResolver | None = None, progress: bool | None = None) -> _Plan:
    from hwmodels.paths import get_path, resolve_path
    from simulator.engines.analytical import spec_digest
    from simulator.report.progress import progress_bar

    fixed_h = dict(exp.fixed.get("hardware", {}))
    calib = fixed_h.get("calibration")
    calib = str(_resolve_file(calib, exp.base_dir)) if calib else None
    source = f"sweep axis of experiment {Path(exp.path).name}"
    base_dir = str(exp.base_dir)
    settings = _Settings(exp, exp.fixed.get("workload", {}), exp.fixed.get("options", {}), fixed_h.get("name"))
    # first pass: the distinct workloads, keyed (graph built and digested) together, in parallel if asked
    graph_info = dict((resolve or _resolve_graphs_serial)(_listed_workloads(exp, settings, progress), base_dir))
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    rows: dict[str, dict[str, Any]] = {}
    errors: list[dict[str, Any]] = []
    hw_info: dict[str, Any] = {}
    path_info: dict[tuple[str, str], tuple[str, Any]] = {}
    opt_info: dict[str, dict[str, Any]] = {}
    n_all = 0
    bar = progress_bar(exp.size, desc=f"{exp.name}: planning: keying points", unit="pt", enabled=progress)
    for point in exp.points():
        n_all += 1
        if n_all % _PLAN_TICK == 0:
            bar.update(_PLAN_TICK)
        w, wj = settings.workload(point)
        o, oj = settings.options(point)
        hw = settings.hardware(point)
        if hw not in hw_info:
            spec = _hardware(hw, calib)
            hw_info[hw] = (spec, spec_digest(spec))
        spec, sd = hw_info[hw]
        ov = settings.overrides(point)
        norm = {}
        for p, v in ov.items():
            pk = (hw, p)
            if pk not in path_info:
                path_info[pk] = (resolve_path(spec, p), _num_key(get_path(spec, p)))
            full, base_v = path_info[pk]
            if base_v != _num_key(v):
                norm[full] = _num_key(v)
        status, gd = graph_info[wj]
        if oj not in opt_info:  # a plan no model could run (shard_group 3 of dp 8) is the point's error, as tp 3 is
            try:
                opt_info[oj] = ("ok", _options_identity(o))
            except _USER_ERRORS as exc:
                opt_info[oj] = ("error", _user_error(exc))
        ostatus, od = opt_info[oj]
        c, cj = settings.cost(point)
        key = point_key({"kind": "model", "graph": gd if status == "ok" else wj, "spec": sd,
                         "overrides": norm, "options": od if ostatus == "ok" else oj, **({"cost": c} if cj else {})})
        if key in rows:
            continue
        rows[key] = point
        if status != "ok" or ostatus != "ok":
            errors.append({"point_key": key, "error": gd if status != "ok" else od})
            continue
        grp = groups.get((wj, hw, oj, cj))
        if grp is None:
            groups[(wj, hw, oj, cj)] = grp = {"kind": "model", "workload": w, "hardware": hw, "calibration": calib,
                                              "options": o, "base_dir": base_dir, "source": source,
                                              "metrics": list(exp.metrics), "points": [], "cost": c}
        grp["points"].append((key, ov))
    bar.total = n_all  # the points that passed the filters
    bar.update(n_all % _PLAN_TICK)
    bar.close()
    tasks = []
    for grp in groups.values():
        pts = grp["points"]
        for i in range(0, len(pts), MODEL_TASK_POINTS):
            tasks.append({**grp, "points": pts[i:i + MODEL_TASK_POINTS]})
    _warn_mixed_providers(exp, groups.values(), hw_info)
    return _Plan(exp, rows, tasks, errors, exp.size - n_all)


def _warn_mixed_providers(exp: Experiment, groups: Any, hw_info: Mapping[str, Any]) -> None:
    """One warning line on standard error per cloud cost setting of a sweep asking cost metrics whose devices'
    hourly prices come from different providers (:func:`hwmodels.cost.mixed_provider_warning`), as ``tune`` and
    ``serve`` warn; a price file that cannot be read is left to each row's error."""
    if not any(m in COST_METRICS for m in exp.metrics):
        return
    from hwmodels.cost import load_price_entries, mixed_provider_warning
    from simulator.engines.analytical import spec_of

    by_cost: dict[str, tuple[dict[str, Any], set[str]]] = {}
    for grp in groups:
        c = dict(grp.get("cost") or {})
        if str(c.get("mode", "cloud")) == "cloud":
            by_cost.setdefault(json.dumps(c, sort_keys=True), (c, set()))[1].add(grp["hardware"])
    for c, hws in by_cost.values():
        devices = sorted({str(spec_of(hw_info[h][0])[0].name).lower() for h in hws})
        if len(devices) < 2:
            continue
        try:
            table = load_price_entries(str(_resolve_file(c["prices"], exp.base_dir)) if c.get("prices") else None)
        except _USER_ERRORS:
            continue
        warning = mixed_provider_warning(devices, table)
        if warning:
            print(warning, file=sys.stderr)


def _plan_systolic(exp: Experiment, progress: bool | None = None) -> _Plan:
    from hwmodels.systolic import SystolicError, dtype_for_word_bytes, load_systolic_energy
    from simulator.report.progress import track

    fixed_s = dict(exp.fixed.get("systolic", {}))
    fixed_w = dict(exp.fixed.get("workload", {}))
    word_bytes = int(fixed_s.get("word_bytes", 1))
    clock = fixed_s.get("clock_hz")
    per_layer = bool(fixed_s.get("per_layer", False))
    sources: dict[str, Any] = {}  # layer source (canonical JSON) -> (layers, digest) or the error
    rows: dict[str, dict[str, Any]] = {}
    groups: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    errors: list[dict[str, Any]] = []
    n_all = 0
    for point in track(exp.points(), total=exp.size, desc=f"{exp.name}: planning", unit="pt", enabled=progress):
        n_all += 1
        s = {**fixed_s, **{a.key: point[a.name] for a in exp.axes if a.section == "systolic"}}
        w = {**fixed_w, **{a.key: point[a.name] for a in exp.axes if a.section == "workload"}}
        if "topology" in w:
            src = _canon({"topology": str(_resolve_file(w["topology"], exp.base_dir))})
        else:
            src = _canon({"workload": w, "base_dir": str(exp.base_dir)})
        if src not in sources:
            try:
                lay = _layers(src)
                sources[src] = (lay, _layers_digest(lay))
            except _USER_ERRORS as exc:
                sources[src] = exc
        if not isinstance(sources[src], tuple):
            key = point_key({"kind": "systolic", "layers": src, "dataflow": s["dataflow"], **s})
            if key not in rows:
                rows[key] = dict(point)
                errors.append({"point_key": key, "error": _user_error(sources[src])})
            continue
        lay, lay_sha = sources[src]
        layer_names = list(lay.names)
        # operand dtype of the energy: the workload's, else that of a word_bytes word
        dtype = str(w["dtype"]) if "dtype" in w else None
        dtype_error = None
        try:
            dtype = dtype or dtype_for_word_bytes(word_bytes)
            if "energy_j" in exp.metrics:
                load_systolic_energy().mac_j(dtype)
        except SystolicError as exc:
            dtype_error = str(exc)
        if "sram_bytes" in s:
            sizes: tuple[Any, ...] | None = (s["sram_bytes"],) * 3
        elif "ifmap_sram_bytes" in s:
            sizes = (s["ifmap_sram_bytes"], s["filter_sram_bytes"], s["ofmap_sram_bytes"])
        else:
            sizes = None
        words = None if sizes is None else tuple(int(b // word_bytes) for b in sizes)
        base = {"rows": int(s["rows"]), "cols": int(s["cols"]), "sram_words": words,
                "dram": s.get("dram_words_per_cycle")}
        for li in (range(len(layer_names)) if per_layer else [None]):
            p = {**base, "layer": li}
            key = point_key({"kind": "systolic", "layers": lay_sha, "dataflow": s["dataflow"],
                             "word_bytes": word_bytes, "clock_hz": clock, "dtype": dtype,
                             "energy_sha256": _energy_digest(), **p})
            if key in rows:
                continue
            rows[key] = {**point, "workload.layer": layer_names[li]} if per_layer else dict(point)
            if dtype_error is not None:
                errors.append({"point_key": key, "error": f"energy_j: {dtype_error} (or leave energy_j out of "
                                                          "metrics)"})
                continue
            if words is not None and min(words) < 1:
                errors.append({"point_key": key, "error": SystolicError(
                    f"systolic: sram: a scratchpad holds no word of {word_bytes} bytes; got {sizes}").args[0]})
                continue
            groups.setdefault((src, s["dataflow"], dtype), []).append((key, p))
    tasks = []
    for (src, df, dtype), pts in groups.items():
        for i in range(0, len(pts), SYSTOLIC_TASK_POINTS):
            tasks.append({"kind": "systolic", "layers": src, "layers_sha256": sources[src][1], "dataflow": df,
                          "dtype": dtype, "word_bytes": word_bytes, "clock_hz": clock, "metrics": list(exp.metrics),
                          "points": pts[i:i + SYSTOLIC_TASK_POINTS]})
    layer_names_all = sorted({r["workload.layer"] for r in rows.values() if "workload.layer" in r})
    return _Plan(exp, rows, tasks, errors, exp.size - n_all,
                 {"workload.layer": layer_names_all} if per_layer else {})


# ------------------------------------------------------------------------------------------------
# schedulers


def _parse_scheduler(scheduler: str) -> str:
    s = (scheduler or "local").strip()
    if s in ("local", "processes", "threads", "synchronous"):
        return s
    if s.startswith("tcp://"):
        hostport = s[len("tcp://"):]
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SweepError(f"--scheduler: bad address; got {scheduler!r}; expected tcp://HOST:PORT (a Dask "
                             "scheduler, e.g. tcp://127.0.0.1:8786)")
        return s
    from nodeperf.suggest import did_you_mean

    choices = ["local", "processes", "threads", "synchronous"]
    raise SweepError(f"--scheduler: unknown scheduler; got {scheduler!r}; expected local, processes, threads, "
                     f"synchronous or tcp://HOST:PORT{did_you_mean(s, choices)}")


class _Executor:
    """Runs a function over items on the chosen scheduler and yields ``(item, result)`` as they finish.

    The local pool is created on first use and kept for the next call (planning, then evaluation:
    the workers' graph caches carry over). A Dask cluster that has had no worker for
    ``worker_timeout_s`` seconds stops the call with a :class:`SweepError` (what finished is kept).
    """

    def __init__(self, scheduler: str, workers: int, client: Any = None,
                 worker_timeout_s: float = DASK_WORKER_TIMEOUT_S) -> None:
        self.scheduler = scheduler
        self.workers = workers
        self.client = client
        self.worker_timeout_s = worker_timeout_s
        self._pool: Any = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[Any, Any]]:
        if self.scheduler == "synchronous" or (self.client is None and (self.workers <= 1 or len(items) <= 1)):
            for x in items:
                yield x, fn(x)
            return
        if self.client is not None:
            yield from self._dask(fn, items)
            return
        import concurrent.futures as cf

        pool = self._get_pool()
        futs = {pool.submit(fn, x): x for x in items}
        try:
            for f in cf.as_completed(futs):
                yield futs[f], f.result()
        finally:
            for f in futs:
                f.cancel()

    def _get_pool(self) -> Any:
        if self._pool is None:
            import concurrent.futures as cf

            if self.scheduler == "threads":
                self._pool = cf.ThreadPoolExecutor(max_workers=self.workers)
            else:
                import multiprocessing as mp

                fork = "fork" in mp.get_all_start_methods() and sys.platform.startswith("linux")
                self._pool = cf.ProcessPoolExecutor(max_workers=self.workers,
                                                    mp_context=mp.get_context("fork" if fork else "spawn"),
                                                    initializer=_worker_init, initargs=(os.getpid(),))
        return self._pool

    def _dask(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[Any, Any]]:
        client = self.client
        futs = client.map(fn, list(items), pure=False)
        index = {f.key: x for f, x in zip(futs, items, strict=True)}
        pending = set(futs)
        alone_since: float | None = None
        check_every = max(0.05, min(1.0, self.worker_timeout_s / 4))
        checked = time.monotonic()
        try:
            while pending:
                done = {f for f in pending if f.done()}
                pending -= done
                if not done:
                    time.sleep(0.02)
                for f in done:
                    try:
                        result = f.result()
                    except Exception as exc:
                        if type(exc).__name__ == "KilledWorker":
                            raise SweepError(f"--scheduler {self.scheduler}: a task killed every Dask worker that "
                                             f"ran it ({exc}); the finished points are kept; run the same command "
                                             "to resume once the workers are healthy") from None
                        raise
                    yield index[f.key], result
                now = time.monotonic()
                if done:
                    alone_since = None
                    continue
                if now - checked < check_every:
                    continue
                checked = now
                if _cluster_workers(client) > 0:
                    alone_since = None
                    continue
                alone_since = alone_since or now
                if now - alone_since >= self.worker_timeout_s:
                    raise SweepError(f"--scheduler {self.scheduler}: no Dask worker for {self.worker_timeout_s:g} s "
                                     f"({len(pending)} task(s) waiting: the workers died, or none joined); "
                                     "expected workers started with `dask worker "
                                     f"{self.scheduler}`; the finished points are kept: run the same command "
                                     "to resume (--worker-timeout to wait longer)")
        finally:
            for f in pending:
                f.cancel()

    def close(self, wait: bool = False) -> None:
        """Stop the pool: pending tasks are cancelled; ``wait`` joins the workers (after a finished run:
        Python 3.11's pool can fail at interpreter exit after an unjoined shutdown, CPython gh-125451),
        else the workers are left to exit on their own (Ctrl-C, an error: the main process stops now)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None


def _worker_init(parent_pid: int | None = None) -> None:
    """Pool workers leave Ctrl-C to the main process, which stores what is finished and stops them, and
    exit when the main process dies (even by SIGKILL): Linux's ``prctl(PR_SET_PDEATHSIG)`` where
    available, and a thread that watches the parent id everywhere."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:
        exit_with_parent(parent_pid)


#: Seconds between checks of a pool worker's parent (the portable fallback of PR_SET_PDEATHSIG).
PARENT_POLL_S = 1.0


def exit_with_parent(parent_pid: int) -> None:
    """Make this process exit when ``parent_pid`` (its parent) dies: no orphaned pool worker.

    On Linux the kernel sends SIGKILL at the parent's death (``prctl(PR_SET_PDEATHSIG)`` through
    ctypes); on every system a daemon thread checks :func:`os.getppid` every :data:`PARENT_POLL_S`
    seconds and exits when the parent has changed.
    """
    import signal
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            logger.debug("prctl(PR_SET_PDEATHSIG) unavailable; the parent watch thread alone stops orphans")
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="nodeperf-parent-watch", daemon=True).start()


def _connect(address: str, timeout_s: float) -> Any:
    """A Dask client of the scheduler at ``address``; a SweepError within ``timeout_s`` when none answers."""
    try:
        from distributed import Client
    except ImportError:
        raise SweepError(f"--scheduler {address}: needs Dask distributed; got no 'distributed' module; install "
                         "it with: pip install 'nodeperf[dask]'") from None
    try:
        return Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise SweepError(f"--scheduler {address}: no Dask scheduler answered within {timeout_s:g} s ({exc}); "
                         "expected a running `dask scheduler` at that address (see docs/sweep.md)") from None


# ------------------------------------------------------------------------------------------------
# the entry point


def run_sweep(experiment_or_path: Experiment | str | Path, out: str | Path, *, scheduler: str = "local",
              workers: int | None = None, progress: bool | None = None,
              connect_timeout_s: float = DASK_CONNECT_TIMEOUT_S, commit_interval_s: float = COMMIT_INTERVAL_S,
              on_task: Callable[[int, int], None] | None = None, max_points: int | None = None,
              worker_timeout_s: float = DASK_WORKER_TIMEOUT_S) -> SweepSummary:
    """Evaluate every point of an experiment not yet in the store ``out``, and store it.

    Planning (building and digesting each distinct workload's graph to key its points) runs on the
    same workers as the evaluation, and its results are cached in the store, so re-running a
    finished store costs little more than reading its keys.

    Parameters
    ----------
    experiment_or_path
        An :class:`~simulator.sweep.experiment.Experiment` or the path of its TOML file.
    out
        ``*.sqlite`` (default format) or ``*.parquet`` (a folder; needs pyarrow). Created if absent;
        an existing store is extended (points already in it are not recomputed).
    scheduler
        ``"local"`` (a process pool on this machine, :class:`concurrent.futures.ProcessPoolExecutor`;
        in this process when one worker or one task suffices), ``"processes"`` (the same),
        ``"threads"``, ``"synchronous"`` (this process, one task after another) or
        ``"tcp://HOST:PORT"`` (an existing Dask distributed scheduler; its workers must be trusted:
        tasks and results travel as pickles).
    workers
        Pool size (default: the CPUs this process may use). Ignored by Dask.
    progress
        Progress bars (planning, then points) on standard error; default: on a terminal or in a
        notebook (:func:`simulator.report.progress.progress_enabled`).
    connect_timeout_s
        Seconds to wait for a Dask scheduler before failing.
    commit_interval_s
        Seconds between commits of finished tasks (0: after every task); a killed sweep loses at
        most the tasks finished since the last commit, and commits cost a file sync each.
    on_task
        Called as ``on_task(stored_points, todo_points)`` after each commit to the store (finished
        tasks are committed together at most every :data:`COMMIT_INTERVAL_S` seconds).
    max_points
        Refuse an experiment of more points (before filters); default: the file's ``max_points``
        (:data:`~simulator.sweep.experiment.DEFAULT_MAX_POINTS` unless set).
    worker_timeout_s
        Dask only: seconds with tasks left and no worker in the cluster before the sweep stops with
        a SweepError (the finished points stay in the store).

    Returns
    -------
    SweepSummary

    Raises
    ------
    ExperimentError, StoreError, SweepError
        Bad experiment or too many points, a store of another schema or kind or one that cannot be
        written, a bad scheduler; raised before anything is written to the store. A StoreError or
        SweepError raised later (disk full, no Dask worker left) keeps every point stored before.
    SweepInterrupted
        Ctrl-C (a KeyboardInterrupt whose ``message`` says what the store holds).
    """
    t0 = time.perf_counter()
    exp = experiment_or_path if isinstance(experiment_or_path, Experiment) else load_experiment(experiment_or_path)
    if max_points is not None and (isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 1):
        raise SweepError(f"--max-points: got {max_points!r}; expected a positive integer")
    exp.check_size(max_points)
    sched = _parse_scheduler(scheduler)
    if isinstance(commit_interval_s, bool) or not isinstance(commit_interval_s, int | float) \
            or not commit_interval_s >= 0 or not math.isfinite(commit_interval_s):
        raise SweepError(f"--commit-interval: got {commit_interval_s!r}; expected seconds >= 0")
    if isinstance(worker_timeout_s, bool) or not isinstance(worker_timeout_s, int | float) \
            or not worker_timeout_s > 0 or not math.isfinite(worker_timeout_s):
        raise SweepError(f"--worker-timeout: got {worker_timeout_s!r}; expected seconds > 0")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SweepError(f"--workers: got {workers!r}; expected a positive integer")
    n_workers = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    store = open_store(out, exp.kind)  # refuses a foreign or unwritable store before anything is written
    client = _connect(sched, connect_timeout_s) if sched.startswith("tcp://") else None
    executor = _Executor(sched, n_workers, client, float(worker_timeout_s))
    finished = False
    try:
        summary = _sweep(exp, store, executor, progress, on_task, t0, out, float(commit_interval_s))
        finished = True
        return summary
    finally:
        executor.close(wait=finished)
        if client is not None:
            client.close()


@lru_cache(maxsize=1)
def _graph_code_fingerprint() -> str:
    """SHA-256 of the code and data that build graphs (``workloads/``) and of the package version: a cached
    graph digest is used only by the code that computed it."""
    import workloads
    from simulator.version import package_version

    root = Path(workloads.__file__).resolve().parent
    h = hashlib.sha256((package_version() or "unknown").encode())
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.suffix in (".py", ".toml", ".json", ".csv") and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _graph_cache_key(wj: str, base_dir: str) -> str:
    """Cache key of a workload's graph digest: the workload, its folder, the graph code, and a model file's size/time."""
    model = str(_resolve_file(json.loads(wj).get("model", ""), Path(base_dir)))
    sig: Any = None
    try:
        st = Path(model).stat()
        sig = [st.st_size, st.st_mtime_ns]
    except (OSError, ValueError):
        pass
    return "graph:" + hashlib.sha256(_canon([wj, base_dir, _graph_code_fingerprint(), model, sig]).encode()).hexdigest()


class _Planner:
    """Keys an experiment's distinct workloads: from the store's cache, else on the workers, with progress."""

    def __init__(self, exp: Experiment, executor: _Executor, cache: Any, progress: bool | None) -> None:
        self.exp = exp
        self.executor = executor
        self.cache = cache
        self.progress = progress
        self.total = 0
        self.keyed = 0
        self.cached = 0

    def __call__(self, workloads: Sequence[str], base_dir: str) -> dict[str, tuple[str, str]]:
        from simulator.report.progress import progress_bar

        keys = {wj: _graph_cache_key(wj, base_dir) for wj in workloads}
        hit = self.cache.get(list(keys.values())) if self.cache is not None else {}
        out: dict[str, tuple[str, str]] = {wj: ("ok", hit[k]) for wj, k in keys.items() if k in hit}
        todo = [wj for wj in workloads if wj not in out]
        self.total, self.cached = len(workloads), len(out)
        if not todo:
            return out
        new: dict[str, str] = {}
        last = time.monotonic()
        with progress_bar(len(todo), desc=f"{self.exp.name}: planning: graphs", unit="graph",
                          enabled=self.progress) as bar:
            try:
                for _item, (wj, res) in self.executor.map(graph_key_job, [(wj, base_dir) for wj in todo]):
                    out[wj] = res
                    self.keyed += 1
                    if res[0] == "ok":
                        new[keys[wj]] = res[1]
                    bar.update(1)
                    if self.cache is not None and time.monotonic() - last >= COMMIT_INTERVAL_S:
                        self.cache.put(new)
                        new, last = {}, time.monotonic()
            finally:
                if self.cache is not None:
                    self.cache.put(new)
        return out


def _sweep(exp: Experiment, store: Any, executor: _Executor, progress: bool | None,
           on_task: Callable[[int, int], None] | None, t0: float, out: str | Path,
           commit_interval_s: float) -> SweepSummary:
    from simulator.report.progress import progress_bar

    cache = store.plan_cache()
    planner = _Planner(exp, executor, cache, progress)
    try:
        plan = plan_sweep(exp, planner, progress=progress)
    except KeyboardInterrupt:
        kept = (f"the {planner.keyed:,} of {planner.total - planner.cached:,} graphs keyed so far are cached in "
                f"{out}" if planner.keyed else "nothing was written")
        raise SweepInterrupted(f"sweep interrupted while planning, before any point was computed ({kept}); run "
                               "the same command to continue") from None
    finally:
        cache.close()
    axes_values: dict[str, list[Any]] = {a.name: list(a.values) for a in exp.axes}
    axes_values.update(plan.extra_axes)
    store.prepare(exp.name, axes_values, exp.metrics)
    n_done = 0
    errors_now: list[dict[str, Any]] = []
    try:
        done = store.done_keys(exp.metrics)
        reused = [k for k in plan.rows if k in done]
        if store.added_axes and reused:
            store.fill_axes({k: plan.rows[k] for k in reused})
        errors_now = [r for r in plan.errors if r["point_key"] not in done]
        if errors_now:
            store.write([{**plan.rows[r["point_key"]], **r, "experiment": exp.name} for r in errors_now])
        todo_tasks = []
        for t in plan.tasks:
            pts = [p for p in t["points"] if p[0] not in done]
            if pts:
                todo_tasks.append({**t, "points": pts})
        todo = sum(len(t["points"]) for t in todo_tasks)
        failed_before = _error_keys(store)
        n_err = len(errors_now) + sum(1 for k in reused if k in failed_before)
        pending: list[dict[str, Any]] = []
        last = time.monotonic()

        def flush() -> None:
            nonlocal pending, n_done, last
            if pending:
                store.write(pending)  # one transaction
                n_done += len(pending)
                pending = []
                if on_task is not None:
                    on_task(n_done, todo)
            last = time.monotonic()

        bar = progress_bar(todo, desc=exp.name, unit="pt", enabled=progress if todo else False)
        try:
            for _task, rows in executor.map(run_task, todo_tasks):
                pending.extend({**plan.rows[r["point_key"]], **r, "experiment": exp.name} for r in rows)
                n_err += sum(1 for r in rows if r.get("error"))
                bar.update(len(rows))
                if time.monotonic() - last >= commit_interval_s:
                    flush()
        finally:
            try:
                flush()  # finished tasks are kept even when the sweep stops early
            finally:
                bar.close()
    except KeyboardInterrupt:
        raise SweepInterrupted(f"sweep interrupted; {n_done + len(errors_now):,} points computed by this run and "
                               f"every point stored before are in {out}; run the same command to compute the "
                               "rest") from None
    finally:
        store.close()
    client = executor.client
    return SweepSummary(out=str(out), total=len(plan.rows), computed=n_done + len(errors_now), reused=len(reused),
                        errors=n_err, filtered=plan.filtered, seconds=time.perf_counter() - t0,
                        scheduler=executor.scheduler,
                        workers=_cluster_workers(client) if client is not None else executor.workers)


def _cluster_workers(client: Any) -> int:
    """Worker processes the Dask scheduler knows of (0 when it does not say)."""
    try:
        return len(client.scheduler_info().get("workers", {}))
    except Exception:  # noqa: BLE001 - a summary figure only; the sweep itself has finished
        return 0


def _error_keys(store: Any) -> set[str]:
    if store.format != "sqlite" or store._conn is None:
        return set()
    return {r[0] for r in store._conn.execute("SELECT point_key FROM results WHERE error IS NOT NULL")}

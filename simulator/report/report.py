"""Prediction results: one flat, frozen record per op (OpCost), the whole report (CostReport) and its writers.

A :class:`CostReport` holds the per-op records in execution order, totals, breakdowns by kind,
group and bound, the memory-capacity check, warnings (fallback rules, power capping, memory) and
provenance (input hashes, engine, options, calibration id, version). Its writers produce a table
for people, and JSON and CSV for programs; the same report always gives byte-identical JSON.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any

from simulator.report.formatting import si as format_si

__all__ = ["OpCost", "Totals", "MemoryCheck", "CostReport", "BOUNDS", "BYTE_LEVELS", "format_si"]

#: What limits an op: its arithmetic, its data movement, or fixed costs (launch, latency).
BOUNDS: tuple[str, ...] = ("compute", "memory", "latency")
#: Memory levels whose traffic every record reports (main memory, L2, shared memory/registers).
BYTE_LEVELS: tuple[str, ...] = ("dram", "l2", "smem")


@dataclass(frozen=True)
class OpCost:
    """Predicted cost of one op: a flat record.

    Times are seconds; ``time_s`` is what the op adds to the stream, ``compute_s``/``memory_s`` the
    arithmetic and data-movement components of its kernel and ``overhead_s`` the fixed part
    (launch floor, pipeline latency). ``bound`` names the largest of the three. Bytes are per level
    (``dram``: device main memory; ``l2``; ``smem``: shared memory / register-file operand traffic).
    """

    name: str
    kind: str
    group: str
    category: str
    dtype: str
    time_s: float
    energy_j: float
    dynamic_energy_j: float
    static_energy_j: float
    flops: float
    dram_bytes: float
    l2_bytes: float
    smem_bytes: float
    compute_s: float
    memory_s: float
    overhead_s: float
    bound: str
    rule: str
    tile: str = ""
    split_k: int = 1
    ctas: int = 0
    waves: float = 0.0
    ctas_per_sm: int = 0
    kernels: int = 1
    fallback: bool = False
    power_capped: bool = False
    fused_into: str = ""
    notes: str = ""
    matrix_dtype: str = ""  # dtype the matrix unit ran at ("" when the op used no matrix unit)
    memory_level: str = ""  # level whose traffic set memory_s: "l2" or "smem" when not DRAM ("" = DRAM)

    @property
    def bytes_by_level(self) -> dict[str, float]:
        return {"dram": self.dram_bytes, "l2": self.l2_bytes, "smem": self.smem_bytes}

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.time_s if self.time_s > 0 else 0.0

    @property
    def achieved_dram_bytes_per_s(self) -> float:
        return self.dram_bytes / self.time_s if self.time_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class MemoryCheck:
    """Device-memory capacity check: what the work needs resident versus what the device has."""

    weights_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    capacity_bytes: float
    device: str = ""
    #: runtime buffers and allocator reserve together (a parallel plan's GPUs: CUDA context, cuBLAS workspace,
    #: NCCL and FSDP buffers, the caching allocator's rounding; simulator.parallel.compose)
    buffers_bytes: int = 0
    #: the part of ``buffers_bytes`` the caching allocator keeps reserved beyond the live tensors (a stage's
    #: ``reserve_bytes``); ``buffers_bytes - allocator_reserve_bytes`` are the runtime buffers
    allocator_reserve_bytes: int = 0

    @property
    def runtime_buffers_bytes(self) -> int:
        """``buffers_bytes`` without the allocator's reserve (a stage's ``buffers_bytes``)."""
        return self.buffers_bytes - self.allocator_reserve_bytes

    @property
    def required_bytes(self) -> int:
        return (self.weights_bytes + self.activations_bytes + self.kv_cache_bytes + self.gradients_bytes
                + self.optimizer_state_bytes + self.buffers_bytes)

    @property
    def fits(self) -> bool:
        return self.required_bytes <= self.capacity_bytes

    def message(self) -> str:
        """``fits: needs X GiB of Y GiB`` or ``does not fit: needs X GiB, has Y GiB``."""
        need, have = self.required_bytes / 2**30, self.capacity_bytes / 2**30
        parts = [("weights", self.weights_bytes), ("activations", self.activations_bytes),
                 ("KV cache", self.kv_cache_bytes), ("gradients", self.gradients_bytes),
                 ("optimizer state", self.optimizer_state_bytes), ("buffers", self.runtime_buffers_bytes),
                 ("allocator reserve", self.allocator_reserve_bytes)]
        detail = ", ".join(f"{n} {b / 2**30:.2f}" for n, b in parts if b)
        where = f" on {self.device}" if self.device else ""
        if self.fits:
            return f"fits{where}: needs {need:.2f} GiB of {have:.2f} GiB ({detail or 'nothing resident'})"
        return f"does not fit{where}: needs {need:.2f} GiB, has {have:.2f} GiB ({detail})"

    def to_json(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights_bytes, "activations_bytes": self.activations_bytes,
            "kv_cache_bytes": self.kv_cache_bytes, "gradients_bytes": self.gradients_bytes,
            "optimizer_state_bytes": self.optimizer_state_bytes, "buffers_bytes": self.buffers_bytes,
            "runtime_buffers_bytes": self.runtime_buffers_bytes,
            "allocator_reserve_bytes": self.allocator_reserve_bytes, "required_bytes": self.required_bytes,
            "capacity_bytes": _plain(self.capacity_bytes), "fits": self.fits, "message": self.message(),
        }


@dataclass(frozen=True)
class Totals:
    """Whole-graph figures of a report."""

    latency_s: float
    energy_j: float
    dynamic_energy_j: float
    static_energy_j: float
    avg_power_w: float
    flops: float
    achieved_flops_per_s: float
    peak_flops_per_s: float
    mfu: float
    dram_bytes: float
    l2_bytes: float
    smem_bytes: float
    kernels: int
    ops: int

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def import_pandas() -> Any:
    """pandas, the optional extra behind ``to_dataframe`` (an ImportError saying how to install it)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("to_dataframe needs pandas; install it with: pip install 'nodeperf[pandas]'",
                          name="pandas") from exc
    return pd


def _plain(v: Any) -> Any:
    """JSON-safe plain Python values (numpy scalars to float/int/bool; non-finite to strings)."""
    if isinstance(v, bool):
        return v
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


_LAYER_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


def op_template(name: str) -> str:
    """Name with layer indices replaced by ``*`` (``layers.3.attn.q`` -> ``layers.*.attn.q``)."""
    return _LAYER_INDEX.sub("*", name)


@dataclass(frozen=True)
class CostReport:
    """The prediction for one graph on one system.

    Attributes
    ----------
    model, hardware
        Names of the graph and of the device (or system).
    records
        One :class:`OpCost` per op, in execution (topological) order.
    totals
        :class:`Totals` of the whole graph.
    memory
        The capacity check (:class:`MemoryCheck`).
    warnings
        Human-readable warnings (fallback rules, power capping, memory), sorted and de-duplicated.
    provenance
        ``engine``, ``options``, ``graph_sha256``, ``spec_sha256``, ``calibration_id``, ``version``
        and the workload description.
    parallel
        For a prediction under a parallel plan (:mod:`simulator.parallel`): the per-device view,
        a plain dict with ``iteration_time_s`` (training), ``ttft_s``/``tpot_s`` (requests),
        ``tokens_per_s``, ``model_flops_per_s_per_device``, ``memory_per_device_bytes``,
        ``breakdown`` {``compute_s``, ``communication_s``, ``bubble_s``, ``optimizer_s``}, ``plan``
        and ``stages``; then ``records`` are one device's ops of each pipeline stage (names prefixed
        ``stage<k>/``), ``totals`` the whole step on every device and ``memory`` the worst device.
    """

    model: str
    hardware: str
    records: tuple[OpCost, ...]
    totals: Totals
    memory: MemoryCheck
    warnings: tuple[str, ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)
    parallel: dict[str, Any] | None = field(default=None, compare=False)

    # --- convenience ------------------------------------------------------------------------
    @property
    def latency_s(self) -> float:
        return self.totals.latency_s

    @property
    def energy_j(self) -> float:
        return self.totals.energy_j

    @property
    def fits_in_memory(self) -> bool:
        return self.memory.fits

    def op(self, name: str) -> OpCost:
        for r in self.records:
            if r.name == name:
                return r
        raise KeyError(f"report {self.model!r}: no op {name!r}")

    def breakdown(self, by: str = "kind", depth: int | None = 2) -> dict[str, dict[str, float]]:
        """Sums of time, energy, FLOPs and DRAM bytes per ``kind``, ``category``, ``group``,
        ``bound``, ``rule`` or op ``template``; sorted by descending time then key.

        ``depth`` truncates group paths to their first components (``layers.3``).
        """
        acc: dict[str, dict[str, float]] = defaultdict(
            lambda: {"ops": 0, "time_s": 0.0, "energy_j": 0.0, "flops": 0.0, "dram_bytes": 0.0})
        for r in self.records:
            if by == "kind":
                key = r.kind
            elif by == "category":
                key = r.category
            elif by == "group":
                key = ".".join(r.group.split(".")[:depth]) if (r.group and depth) else (r.group or "(top)")
            elif by == "bound":
                key = r.bound
            elif by == "rule":
                key = r.rule
            elif by == "template":
                key = op_template(r.name)
            else:
                raise ValueError(f"breakdown by: got {by!r}; expected kind, category, group, bound, rule or template")
            a = acc[key]
            a["ops"] += 1
            a["time_s"] += r.time_s
            a["energy_j"] += r.energy_j
            a["flops"] += r.flops
            a["dram_bytes"] += r.dram_bytes
        total = self.totals.latency_s or 1.0
        for a in acc.values():
            a["share"] = a["time_s"] / total
        return dict(sorted(acc.items(), key=lambda kv: (-kv[1]["time_s"], kv[0])))

    @property
    def bound_breakdown(self) -> dict[str, float]:
        """Share of the ops' summed time spent in ops of each bound (``compute``, ``memory``, ``latency``); the
        shares sum to 1. Back to back on one device that sum is the latency; a discrete-event schedule overlaps
        ops and a parallel plan's records are one device's ops of each stage, so there the latency would not
        partition (102.7% on two streams, 110% for a two-stage plan)."""
        total = sum(r.time_s for r in self.records) or 1.0
        out = {b: 0.0 for b in BOUNDS}
        for r in self.records:
            out[r.bound] = out.get(r.bound, 0.0) + r.time_s / total
        return out

    # --- writers ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict: the required summary keys first, then details."""
        return {
            "model": self.model,
            "hardware": self.hardware,
            "latency_s": _plain(self.totals.latency_s),
            "energy_j": _plain(self.totals.energy_j),
            "avg_power_w": _plain(self.totals.avg_power_w),
            "flops": _plain(self.totals.flops),
            "achieved_flops_per_s": _plain(self.totals.achieved_flops_per_s),
            "mfu": _plain(self.totals.mfu),
            "memory_required_bytes": self.memory.required_bytes,
            "memory_capacity_bytes": _plain(self.memory.capacity_bytes),
            "fits_in_memory": self.memory.fits,
            "bound_breakdown": _plain(self.bound_breakdown),
            "totals": self.totals.to_json(),
            "memory": self.memory.to_json(),
            "breakdown_by_kind": _plain(self.breakdown("kind")),
            "breakdown_by_group": _plain(self.breakdown("group", depth=2)),
            "warnings": list(self.warnings),
            "provenance": _plain(self.provenance),
            "ops": [r.to_json() for r in self.records],
            **({k: _plain(v) for k, v in self.parallel.items() if k not in ("latency_s", "mfu", "fits_in_memory",
                                                                           "warnings", "model", "hardware")}
               if self.parallel else {}),
            **self._collective_bandwidths(),
        }

    def _collective_bandwidths(self) -> dict[str, Any]:
        """``algbw_bytes_per_s`` and ``busbw_bytes_per_s`` of a collective micro-workload, as nccl-tests
        defines them (doc/PERFORMANCE.md): ``algbw = size / time``, ``busbw = algbw * factor(n)``."""
        w = self.provenance.get("workload", {}) if isinstance(self.provenance, dict) else {}
        if not w.get("collective") or self.totals.latency_s <= 0:
            return {}
        from hwmodels.collectives import bus_bandwidth_factor

        n = int(w.get("devices") or self.provenance.get("devices", 1))
        kind = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                "alltoall": "all_to_all", "broadcast": "broadcast", "sendrecv": "send_recv"}[w["collective"]]
        algbw = float(w["size_bytes"]) / self.totals.latency_s
        return {"algbw_bytes_per_s": algbw,
                "busbw_bytes_per_s": algbw * (bus_bandwidth_factor(kind, n) if n > 1 else 1.0), "devices": n}

    def to_json(self, indent: int | None = None) -> str:
        """Deterministic JSON text (sorted keys; the same report gives the same bytes)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent, allow_nan=False)

    def to_csv(self) -> str:
        """One row per op with every :class:`OpCost` field as a column."""
        buf = io.StringIO()
        names = [f.name for f in fields(type(self.records[0]) if self.records else OpCost)]
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(names)
        for r in self.records:
            w.writerow([_csv_cell(getattr(r, n)) for n in names])
        return buf.getvalue()

    def to_dataframe(self) -> Any:
        """The records as a pandas DataFrame (pandas is an optional extra, imported here).

        Returns
        -------
        pandas.DataFrame
            One row per op record, in execution order, with every :class:`OpCost` field as a
            column (SI units, as in :meth:`to_csv`). ``df.attrs`` holds the report-level values:
            ``model``, ``hardware``, ``totals`` and ``memory`` (as in :meth:`to_dict`),
            ``bound_breakdown``, ``warnings`` and ``provenance``.

        Raises
        ------
        ImportError
            When pandas is not installed.
        """
        pd = import_pandas()
        names = [f.name for f in fields(OpCost)]
        df = pd.DataFrame([[getattr(r, n) for n in names] for r in self.records], columns=names)
        df.attrs.update({
            "model": self.model,
            "hardware": self.hardware,
            "totals": self.totals.to_json(),
            "memory": self.memory.to_json(),
            "bound_breakdown": _plain(self.bound_breakdown),
            "warnings": list(self.warnings),
            "provenance": _plain(self.provenance),
        })
        return df

    def to_table(self, top: int = 15, aggregate: bool = True) -> str:
        """Readable table of the top ops by time and the totals.

        With ``aggregate`` ops that differ only by layer index (``layers.*.mlp.up``) are summed
        into one row with their count.
        """
        total = self.totals.latency_s or 1.0
        rows: list[tuple[str, str, int, float, float, float, float, str, str, str]] = []
        if aggregate:
            groups: dict[str, list[OpCost]] = defaultdict(list)
            for r in self.records:
                groups[op_template(r.name)].append(r)
            items = list(groups.items())
        else:
            items = [(r.name, [r]) for r in self.records]
        for name, rs in items:
            t = sum(r.time_s for r in rs)
            fl = sum(r.flops for r in rs)
            by = sum(r.dram_bytes for r in rs)
            level = rs[0].memory_level if rs[0].memory_level in ("l2", "smem") else ""
            if level:  # bound by on-chip traffic: show the bandwidth of the level that binds
                by = sum(r.bytes_by_level[level] for r in rs)
            bounds = defaultdict(float)
            for r in rs:
                bounds[r.bound] += r.time_s
            bound = max(sorted(bounds), key=lambda b: bounds[b])
            r0 = rs[0]
            how = r0.rule + (f" {r0.tile}" if r0.tile else "") + (f" split-k {r0.split_k}" if r0.split_k > 1 else "")
            if r0.waves:
                how += f", {r0.waves:.2f} waves"
            if r0.fused_into:
                how += " (fused)"
            if any(r.fallback for r in rs):
                how += " [FALLBACK]"
            if any(r.power_capped for r in rs):
                clock = re.search(r"sustained [0-9.]+ GHz under [0-9.]+ W", r0.notes)  # DVFS: the clock it held
                how += f" [{clock.group(0)}]" if clock else " [power-capped]"
            rows.append((name, r0.kind, len(rs), t, t / total, fl, by, bound, how, level))
        rows.sort(key=lambda x: (-x[3], x[0]))
        shown = rows[:top]
        name_w = min(48, max([len("op")] + [len(r[0]) for r in shown]))
        kind_w = max([len("kind")] + [len(r[1]) for r in shown])
        lines = []
        head = (f"{'#':>3}  {'op':<{name_w}}  {'kind':<{kind_w}}  {'n':>4}  {'time':>10}  {'share':>6}  "
                f"{'bound':<8}  {'achieved':>13}  how")
        lines.append(head)
        lines.append("-" * len(head))
        for i, (name, kind, n, t, share, fl, by, bound, how, level) in enumerate(shown, 1):
            if len(name) > name_w:
                name = "..." + name[-(name_w - 3):]
            if bound == "compute" or (fl and t and fl / t > 1e12 and by / t < 1e11):
                ach = f"{fl / t / 1e12:7.1f} TFLOP/s" if t else ""
            else:
                ach = (f"{by / t / 1e12:.2f} TB/s {level.upper()}" if level else f"{by / t / 1e12:8.2f} TB/s") if t else ""
            lines.append(f"{i:>3}  {name:<{name_w}}  {kind:<{kind_w}}  {n:>4}  {format_si(t, 's'):>10}  "
                         f"{share * 100:5.1f}%  {bound:<8}  {ach:>13}  {how}")
        if len(rows) > top:
            rest = sum(r[3] for r in rows[top:])
            lines.append(f"     ... {len(rows) - top} more rows, {format_si(rest, 's')} ({rest / total * 100:.1f}%)")
        tt = self.totals
        lines.append("")
        lines.append(
            f"Totals: latency {format_si(tt.latency_s, 's')}, energy {format_si(tt.energy_j, 'J')}, "
            f"average power {tt.avg_power_w:.0f} W, {format_si(tt.flops, 'FLOP')}, "
            f"achieved {format_si(tt.achieved_flops_per_s, 'FLOP/s')}, MFU {tt.mfu * 100:.1f}%, "
            f"{tt.kernels} kernels"
        )
        bb = self.bound_breakdown
        lines.append("Bound:  " + ", ".join(f"{b} {bb.get(b, 0.0) * 100:.1f}%" for b in BOUNDS) + " of the time")
        lines.append(f"Memory: {self.memory.message()}")
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return "\n".join(lines)


def _csv_cell(v: Any) -> Any:
    if isinstance(v, float):
        return repr(v)
    return v

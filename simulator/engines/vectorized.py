"""Hardware variants of one graph in one pass: every unique op costed once over arrays of spec values.

:func:`evaluate_variants` predicts a graph on ``V`` variants of a base spec that differ only in
numeric hardware fields (dotted paths of :mod:`hwmodels.paths`). It walks the graph with the
engine's own walk (:func:`simulator.engines.walk.walk_graph`: execution order, view aliases, L2
residency of the previous kernel's outputs, optional fusion, one slot per unique op signature), and
costs each slot by calling its lowering rule once on a device spec whose varied fields hold
numpy arrays of length ``V``: the GPU component models (:func:`hwmodels.gpu.gemm`,
:func:`~hwmodels.gpu.attention`, :func:`~hwmodels.gpu.streaming`, :func:`~hwmodels.gpu.roofline`)
broadcast over them. The launch floor, energy (:func:`hwmodels.energy.dynamic_energy`) and the TDP
power cap (:func:`hwmodels.energy.kernel_energy`) are applied element by element as the engine
applies them per op. The totals equal those of ``evaluate(graph, with_overrides(base, variant_i))``
for every variant (to rounding).

What is not vectorised is still exact, by a loop over variants:

* ops whose rule cannot take arrays (RNN steps, collectives), or cannot take a varied path as an
  array (:data:`LOOPED_PATH_RULES`, empty today), are lowered once per variant on the variant's own
  spec, inside the vectorised walk;
* fields that change discrete structure (the L2 capacity, which decides which outputs stay resident
  for the next kernel) split the variants into groups of equal value, each vectorised;
* TPU and CPU devices, system-level fields (``count``, ``fabric.*``, ``nodes``) and non-numeric
  fields are evaluated variant by variant with :func:`evaluate`.

A parallel plan is not this engine's: :func:`simulator.front.evaluate_variants` (what
``nodeperf.evaluate_variants`` is) evaluates one variant by variant through
:func:`simulator.front.evaluate`.

:attr:`VariantResult.method` says which way each call went.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwmodels.energy import dvfs_kernel, dynamic_energy, kernel_energy
from hwmodels.paths import (
    SweepPathError,
    field_unit_of,
    first_invalid,
    parse_quantity,
    resolve_path,
    with_overrides,
)
from hwmodels.spec import DeviceSpec, SystemSpec
from hwmodels.spec import get_path as _spec_get_path
from hwmodels.spec import replace_path as _spec_replace_path
from nodeperf.errors import NodeperfError
from simulator.engines.analytical import (
    EnergyCoefficients,
    collectives_of,
    evaluate,
    fused_cost,
    host_floor_s,
    l2_capacity,
    module_host_s,
    spec_of,
)
from simulator.engines.options import EvalOptions
from simulator.engines.walk import FUSED, VIEW, settle_warm, walk_graph
from simulator.lowering import KernelCost, LoweringContext, lower, rule_name_for
from simulator.lowering.common import check_dtype_rates, kernel_device_s
from simulator.report import CostReport
from simulator.report.memory import check_memory
from workloads.ir import Op, OpGraph

__all__ = ["VariantResult", "VariantError", "evaluate_variants", "variant_overrides", "ARRAY_SAFE_GPU_RULES", "LOOPED_PATH_RULES",
           "CHUNK_VARIANTS", "per_variant", "unique_rows"]

#: GPU lowering rules (names as :func:`simulator.lowering.rule_name_for` gives them; ``None`` is the
#: roofline fallback) that take a device spec holding arrays and return arrays.
ARRAY_SAFE_GPU_RULES: frozenset[str | None] = frozenset(
    {"gemm", "grouped_gemm", "grouped_gemm_bwd", "conv", "attention", "streaming", "router", "view", None}
)
#: Spec paths some array-safe rules cannot take as arrays, ``{path: rule names}``: ops of those rules
#: are lowered variant by variant when such a path varies. Empty: every numeric field of a GPU spec,
#: the GEMM occupancy's thread and CTA limits included, broadcasts (kept as the hook for a rule that
#: would not).
LOOPED_PATH_RULES: dict[str, frozenset[str]] = {}

#: KernelCost fields stacked per variant when an op is lowered variant by variant (the arithmetic counts too:
#: a rule may spend instructions that depend on a hardware field, e.g. the dequantisation of quantised weights)
_COST_ARRAYS = ("compute_s", "memory_s", "latency_s", "dram_bytes", "l2_bytes", "smem_bytes", "matrix_flops",
                "vector_flops", "chain_flops")


@dataclass(frozen=True)
class VariantResult:
    """Predictions for ``n`` hardware variants of one graph (arrays of length ``n``, variant order).

    Attributes
    ----------
    latency_s, energy_j
        Whole-graph latency (s) and energy (J), as ``CostReport.totals`` gives them.
    dynamic_energy_j, static_energy_j
        The two parts of ``energy_j``.
    power_w
        Average power, ``energy_j / latency_s`` (0 where the latency is 0).
    memory_bytes
        Bytes the graph needs resident in device memory (weights, peak activations, KV cache...);
        hardware numbers do not change it.
    capacity_bytes, fits
        Main-memory capacity of each variant and whether ``memory_bytes`` fits in it.
    power_capped_ops
        Ops stretched by the TDP power cap, per variant.
    overrides
        The SI value of every varied path per variant (paths as given).
    method
        ``"vectorized"`` (one pass over arrays), ``"vectorized-grouped"`` (one pass per group of a
        structural field) or ``"per-variant"`` (a loop over :func:`evaluate`); ``reason`` says why a
        call was not vectorised.
    looped_op_kinds
        Op kinds lowered variant by variant inside the vectorised pass (their rule takes no arrays).
    op_names, op_time_s, op_energy_j
        With ``per_op=True``: every op's name (execution order, views included) and its time and
        energy per variant, shape ``(ops, n)``; else empty.
    """

    latency_s: np.ndarray
    energy_j: np.ndarray
    dynamic_energy_j: np.ndarray
    static_energy_j: np.ndarray
    power_w: np.ndarray
    memory_bytes: np.ndarray
    capacity_bytes: np.ndarray
    fits: np.ndarray
    power_capped_ops: np.ndarray
    overrides: dict[str, np.ndarray]
    method: str
    reason: str = ""
    looped_op_kinds: tuple[str, ...] = ()
    op_names: tuple[str, ...] = ()
    op_time_s: np.ndarray | None = None
    op_energy_j: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.latency_s.shape[0])

    def variant(self, i: int) -> dict[str, Any]:
        """The overrides of variant ``i`` as ``{path: SI value}`` (for :func:`with_overrides`)."""
        return {p: v[i].item() if hasattr(v[i], "item") else v[i] for p, v in self.overrides.items()}


# ------------------------------------------------------------------------------------------------
# overrides: validation and broadcasting


def _column(spec: DeviceSpec | SystemSpec, path: str, values: Any) -> tuple[np.ndarray, bool]:
    """(SI values as a 1-D array, numeric?) of one override, every element checked against the field."""
    out, numeric = _column_values(spec, path, values)
    if numeric and np.any(out != 1.0):
        from hwmodels.loader import empty_scaled_table

        table = empty_scaled_table(spec, resolve_path(spec, path))
        if table is not None:
            raise SweepPathError(f"{path}: nothing to scale; got {values!r} on a device whose {table} is empty (no "
                                 "measured table); expected 1, or a device whose catalog gives the table (Hopper)")
    return out, numeric


def _column_values(spec: DeviceSpec | SystemSpec, path: str, values: Any) -> tuple[np.ndarray, bool]:
    unit = field_unit_of(spec, path)
    arr = np.asarray(values)
    if arr.ndim > 1:
        raise SweepPathError(f"{path}: values; got an array of shape {arr.shape}; expected one value or a 1-D "
                             "sequence of values (one per variant)")
    arr = np.atleast_1d(arr)
    if unit == "":  # a choice string (systolic.dataflow): checked by with_overrides per variant
        for v in arr.tolist():
            with_overrides(spec, {path: v})
        return arr.astype(object), False
    if arr.dtype.kind in "fiu":
        out = arr.astype(float)
        bad = first_invalid(out, unit, path)
        if bad is not None:  # the scalar check words the message
            parse_quantity(arr[bad].item(), unit, path=f"{path}[{bad}]")
            raise SweepPathError(f"{path}[{bad}]: invalid value; got {arr[bad].item()!r}; expected {unit}")
        return out, True
    if arr.dtype.kind == "b":
        raise SweepPathError(f"{path}: values; got booleans; expected numbers or unit strings")
    out = np.empty(arr.shape[0], dtype=float)
    for i, v in enumerate(arr.tolist()):
        out[i] = parse_quantity(v, unit, path=f"{path}[{i}]" if arr.shape[0] > 1 else path)
    return out, True


def variant_overrides(spec: DeviceSpec | SystemSpec, overrides: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
    """Validated overrides broadcast to one length: ``({path: SI array}, n_variants)``.

    Each value is a number, a unit string, or a 1-D sequence of them; sequences share one length
    ``V``, single values repeat. No override means one variant (the base spec).

    Raises
    ------
    SweepPathError
        Unknown path (nearest known paths listed), a value the field cannot take (with its index),
        or sequences of different lengths.
    """
    cols: dict[str, np.ndarray] = {}
    for path, values in overrides.items():
        cols[path], _ = _column(spec, path, values)
    lengths = {p: c.shape[0] for p, c in cols.items()}
    multi = {n for n in lengths.values() if n != 1}
    if len(multi) > 1:
        listed = ", ".join(f"{p}: {n}" for p, n in lengths.items())
        raise SweepPathError(f"overrides: value lists of different lengths; got {listed}; expected one length "
                             "(one value per variant) or single values")
    n = multi.pop() if multi else 1
    return {p: (np.repeat(c, n) if c.shape[0] == 1 and n > 1 else c) for p, c in cols.items()}, n


# ------------------------------------------------------------------------------------------------
# the public entry point


#: Variants evaluated per vectorised pass; larger calls are split (exact: variants are independent).
#: The GEMM model further times its candidate tiles in blocks of
#: :data:`hwmodels.gpu.GEMM_BLOCK_VARIANTS` variants, whose arrays stay in the CPU caches; a larger
#: pass here spreads the walk's fixed costs (one lowering per unique op) over more variants.
CHUNK_VARIANTS = 16384


def evaluate_variants(graph: OpGraph, base_spec: DeviceSpec | SystemSpec, overrides: Mapping[str, Any] | None = None,
                      options: EvalOptions | None = None, *, per_op: bool = False,
                      dedupe: bool = True, chunk: int = CHUNK_VARIANTS) -> VariantResult:
    """Predict ``graph`` on every hardware variant ``base_spec`` + ``overrides[i]`` in one pass.

    Parameters
    ----------
    graph
        The workload, built once.
    base_spec
        Device or system the variants start from.
    overrides
        ``{dotted path: values}``; values are SI numbers or unit strings, one per variant (1-D,
        common length ``V``) or one for all. Paths as in :func:`hwmodels.paths.with_overrides`.
    options
        :class:`EvalOptions` as for :func:`evaluate`.
    per_op
        Also return every op's time and energy per variant (``(ops, V)`` arrays).
    dedupe
        Evaluate identical variants once (exact; they give identical results).
    chunk
        Variants per vectorised pass (:data:`CHUNK_VARIANTS`); only speed depends on it.

    Returns
    -------
    VariantResult
        Arrays of length ``V``; ``latency_s[i]`` and ``energy_j[i]`` equal the totals of
        ``evaluate(graph, with_overrides(base_spec, variant i), options)``.

    Raises
    ------
    SweepPathError
        An unknown path or a bad value (located); errors of :func:`evaluate` common to all variants
        (a dtype without a rate) as it raises them.
    VariantError
        A variant the graph cannot run on (no GEMM tile fits its shared memory...): the first one,
        with its index and values, and the op.
    """
    opts = options or EvalOptions()
    if opts.plan is not None:
        raise ValueError(f"evaluate_variants: options.plan: the engine evaluates one device's graph; got a parallel "
                         f"plan {opts.plan!r}; expected no plan here: simulator.front.evaluate_variants "
                         "(nodeperf.evaluate_variants) evaluates a plan variant by variant")
    cols, n = variant_overrides(base_spec, overrides or {})
    full = {p: resolve_path(base_spec, p) for p in cols}
    if dedupe and n > 1 and cols:
        keys = np.stack([_codes(c) for c in cols.values()], axis=1)
        first, inverse = unique_rows(keys)
        if first.shape[0] < n:
            sub = {p: c[first] for p, c in cols.items()}
            try:
                res = _chunked(graph, base_spec, sub, full, int(first.shape[0]), opts, per_op, chunk)
            except VariantError as exc:
                raise exc.at(int(first[exc.index])) from None
            return _take(res, inverse, cols)
    return _chunked(graph, base_spec, cols, full, n, opts, per_op, chunk)


def _chunked(graph: OpGraph, base: DeviceSpec | SystemSpec, cols: dict[str, np.ndarray], full: dict[str, str],
             n: int, opts: EvalOptions, per_op: bool, chunk: int) -> VariantResult:
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise SweepPathError(f"evaluate_variants: chunk; got {chunk!r}; expected an integer >= 1")
    if n <= chunk:
        return _evaluate_columns(graph, base, cols, full, n, opts, per_op)
    parts = []
    for lo in range(0, n, chunk):
        idx = np.arange(lo, min(n, lo + chunk))
        sub = {p: c[idx] for p, c in cols.items()}
        try:
            parts.append((idx, _evaluate_columns(graph, base, sub, full, int(idx.shape[0]), opts, per_op)))
        except VariantError as exc:
            raise exc.at(int(idx[exc.index])) from None
    return _merge(parts, n, cols)


def unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first occurrence of each distinct row, in lexicographic order of the rows; the
    distinct row of every row): ``np.unique(keys, axis=0, return_index=True, return_inverse=True)``'s
    last two results, by one stable lexicographic sort of the columns (about twice as fast)."""
    order = np.lexsort(keys.T[::-1])  # stable: equal rows keep their order, the first comes first
    rows = keys[order]
    new = np.empty(rows.shape[0], dtype=bool)
    new[:1] = True
    np.any(rows[1:] != rows[:-1], axis=1, out=new[1:])
    inverse = np.empty(rows.shape[0], dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def _codes(c: np.ndarray) -> np.ndarray:
    if c.dtype == object:
        _, inv = np.unique(c.astype(str), return_inverse=True)
        return np.asarray(inv, dtype=float).reshape(-1)
    return c


def _take(res: VariantResult, idx: np.ndarray, cols: dict[str, np.ndarray]) -> VariantResult:
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(res):
        v = getattr(res, f.name)
        if f.name == "overrides":
            kw[f.name] = cols
        elif f.name in ("op_time_s", "op_energy_j"):
            kw[f.name] = None if v is None else v[:, idx]
        elif isinstance(v, np.ndarray):
            kw[f.name] = v[idx]
        else:
            kw[f.name] = v
    return VariantResult(**kw)


def _evaluate_columns(graph: OpGraph, base: DeviceSpec | SystemSpec, cols: dict[str, np.ndarray],
                      full: dict[str, str], n: int, opts: EvalOptions, per_op: bool) -> VariantResult:
    dev = base.device if isinstance(base, SystemSpec) else base
    reason = ""
    if dev.kind != "gpu":
        reason = f"{dev.kind} devices are evaluated per variant (their rules take no arrays)"
    elif any(not fp.startswith("device.") for fp in full.values()) and isinstance(base, SystemSpec):
        reason = "system fields (count, fabric, nodes) are evaluated per variant"
    elif any(c.dtype == object for c in cols.values()):
        reason = "non-numeric fields are evaluated per variant"
    if reason:
        return _per_variant(graph, base, cols, n, opts, per_op, reason, evaluate)
    structural = _structural_paths(dev, full)
    if not structural:
        return _vector_gpu(graph, base, cols, full, n, opts, per_op, "vectorized")
    # one vectorised pass per group of equal structural values
    keys = np.stack([cols[p] for p in structural], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    parts: list[tuple[np.ndarray, VariantResult]] = []
    for g in range(uniq.shape[0]):
        idx = np.nonzero(inverse == g)[0]
        sub = {p: c[idx] for p, c in cols.items()}
        try:
            parts.append((idx, _vector_gpu(graph, base, sub, full, int(idx.shape[0]), opts, per_op,
                                           "vectorized-grouped")))
        except VariantError as exc:
            raise exc.at(int(idx[exc.index])) from None
    return _merge(parts, n, cols)


def _structural_paths(dev: DeviceSpec, full: dict[str, str]) -> list[str]:
    """Override paths whose value changes discrete structure of the GPU walk: the L2 capacity decides
    which outputs the next kernel finds resident (the engine's L2 is the level named l2/llc)."""
    l2 = next((lv for lv in dev.memory if lv.name.lower() in ("l2", "llc")), None)
    if l2 is None:
        return []
    target = f"memory.{l2.name}.capacity_bytes"
    return [p for p, fp in full.items() if fp.removeprefix("device.") == target]


def _merge(parts: list[tuple[np.ndarray, VariantResult]], n: int, cols: dict[str, np.ndarray]) -> VariantResult:
    first = parts[0][1]
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(first):
        v = getattr(first, f.name)
        if f.name == "overrides":
            kw[f.name] = cols
        elif f.name in ("op_time_s", "op_energy_j"):
            if v is None:
                kw[f.name] = None
            else:
                out = np.empty((v.shape[0], n))
                for idx, r in parts:
                    out[:, idx] = getattr(r, f.name)
                kw[f.name] = out
        elif isinstance(v, np.ndarray):
            out = np.empty(n, dtype=v.dtype)
            for idx, r in parts:
                out[idx] = getattr(r, f.name)
            kw[f.name] = out
        elif f.name == "looped_op_kinds":
            kw[f.name] = tuple(sorted({k for _, r in parts for k in r.looped_op_kinds}))
        else:
            kw[f.name] = v
    return VariantResult(**kw)


# ------------------------------------------------------------------------------------------------
# per-variant loop (the reference path, and the fallback)



class VariantError(NodeperfError, ValueError):
    """One hardware variant cannot run the graph; the message names the variant and its values."""

    def __init__(self, index: int, values: str, message: str) -> None:
        super().__init__(f"variant {index} ({values}): {message}")
        self.index, self.values, self.detail = index, values, message

    def at(self, index: int) -> VariantError:
        """The same error for the variant's index in the caller's numbering."""
        return VariantError(index, self.values, self.detail)


def _variant_specs(base: DeviceSpec | SystemSpec, cols: dict[str, np.ndarray], n: int) -> Callable[[int], Any]:
    cache: dict[int, Any] = {}

    def values(i: int) -> dict[str, Any]:
        return {p: c[i].item() if hasattr(c[i], "item") else c[i] for p, c in cols.items()}

    def get(i: int) -> Any:
        if i not in cache:
            cache[i] = with_overrides(base, values(i))
        return cache[i]

    get.values = values  # type: ignore[attr-defined]
    return get


def _variant_text(spec_i: Callable[[int], Any], i: int) -> str:
    vals = spec_i.values(i)  # type: ignore[attr-defined]
    return ", ".join(f"{p}={v!r}" for p, v in vals.items()) or "the base spec"


def per_variant(graph: OpGraph, base_spec: DeviceSpec | SystemSpec, overrides: Mapping[str, Any] | None,
                options: EvalOptions, evaluate_fn: Callable[[OpGraph, Any, EvalOptions], CostReport], *,
                per_op: bool = False, reason: str = "") -> VariantResult:
    """:func:`evaluate_variants`'s result computed by ``evaluate_fn(graph, variant spec, options)`` per
    variant (``method="per-variant"``): the reference path, and the path of an evaluator that takes no
    arrays (:func:`simulator.front.evaluate_variants` passes :func:`simulator.front.evaluate` for a
    parallel plan)."""
    cols, n = variant_overrides(base_spec, overrides or {})
    return _per_variant(graph, base_spec, cols, n, options, per_op, reason, evaluate_fn)


def _per_variant(graph: OpGraph, base: DeviceSpec | SystemSpec, cols: dict[str, np.ndarray], n: int,
                 opts: EvalOptions, per_op: bool, reason: str,
                 evaluate_fn: Callable[[OpGraph, Any, EvalOptions], CostReport]) -> VariantResult:
    spec_i = _variant_specs(base, cols, n)
    lat, en, dyn, st, cap, capped, mem = (np.zeros(n) for _ in range(7))
    fits = np.zeros(n, dtype=bool)
    names: tuple[str, ...] = ()
    op_t: list[np.ndarray] = []
    op_e: list[np.ndarray] = []
    for i in range(n):
        try:
            r = evaluate_fn(graph, spec_i(i), opts)
        except ValueError as exc:
            raise VariantError(i, _variant_text(spec_i, i), str(exc)) from None
        t = r.totals
        lat[i], en[i], dyn[i], st[i] = t.latency_s, t.energy_j, t.dynamic_energy_j, t.static_energy_j
        capped[i] = sum(1 for rec in r.records if rec.power_capped)
        mem[i], cap[i], fits[i] = r.memory.required_bytes, r.memory.capacity_bytes, r.memory.fits
        if per_op:
            names = tuple(rec.name for rec in r.records)
            op_t.append(np.array([rec.time_s for rec in r.records]))
            op_e.append(np.array([rec.energy_j for rec in r.records]))
    power = np.divide(en, lat, out=np.zeros(n), where=lat > 0)
    return VariantResult(
        latency_s=lat, energy_j=en, dynamic_energy_j=dyn, static_energy_j=st, power_w=power, memory_bytes=mem,
        capacity_bytes=cap, fits=fits, power_capped_ops=capped.astype(int), overrides=cols, method="per-variant",
        reason=reason, op_names=names, op_time_s=np.stack(op_t, axis=1) if per_op else None,
        op_energy_j=np.stack(op_e, axis=1) if per_op else None,
    )


# ------------------------------------------------------------------------------------------------
# the vectorised GPU walk


def _array_device(dev: DeviceSpec, cols: dict[str, np.ndarray], full: dict[str, str]) -> DeviceSpec:
    """``dev`` with each overridden field holding its array of variant values (count fields as ints)."""
    out = dev
    for p, c in sorted(cols.items(), key=lambda kv: full[kv[0]].endswith("usable_bytes")):  # after capacity_bytes
        path = full[p].removeprefix("device.")
        current = _spec_get_path(dev, path)
        vals = c.astype(np.int64) if isinstance(current, int) and not isinstance(current, bool) else c
        out = _spec_replace_path(out, path, vals)
    return out


def _vec(x: Any, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=float), (n,))


def _vector_gpu(graph: OpGraph, base: DeviceSpec | SystemSpec, cols: dict[str, np.ndarray], full: dict[str, str],
                n: int, opts: EvalOptions, per_op: bool, method: str) -> VariantResult:
    """The engine's walk (:func:`simulator.engines.walk.walk_graph`) with each slot costed once over
    arrays of the ``n`` variants (:func:`_slot_arrays`), summed as the engine sums its records."""
    dev0, _, count, fabric = spec_of(base)
    dev = _array_device(dev0, cols, full) if cols else dev0
    fuse = opts.fusion if opts.fusion is not None else dev0.kind == "tpu"
    l2cap = float(_vec(l2_capacity(dev), n)[0])  # equal over the variants (_structural_paths)
    opts = settle_warm(graph, opts, l2cap)  # a warm loop only where the whole graph fits in L2
    walk = walk_graph(graph, opts, fuse, l2cap)
    check_dtype_rates(walk.rate_ops, dev0)  # refused before any op is costed, as evaluate does
    ctx = LoweringContext(dev, opts, fabric=fabric, group_size=count, collectives=collectives_of(base),
                          nodes=int(getattr(base, "nodes", 1)))
    looped: set[str] = set()
    values = _slot_arrays(walk, base, dev, cols, full, n, opts, ctx, looped)
    lat, dyn, st, capped = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, dtype=int)
    for slot, v in zip(walk.slots, values, strict=True):
        if v is None:
            continue
        t, e_dyn, e_st, cp = v
        c = slot.count
        lat += c * t
        dyn += c * e_dyn
        st += c * e_st
        capped += c * cp.astype(int)
    en = dyn + st
    required = float(check_memory(graph, dev0).required_bytes)
    capacity = _vec(dev.main_memory.usable, n).copy()
    op_t = op_e = None
    names: tuple[str, ...] = ()
    if per_op:
        names = tuple(f["name"] for f in walk.op_fields)
        zero = np.zeros(n)
        op_t = np.stack([zero if values[i] is None else values[i][0] for i in walk.op_slots])
        op_e = np.stack([zero if values[i] is None else values[i][1] + values[i][2] for i in walk.op_slots])
    return VariantResult(
        latency_s=lat, energy_j=en, dynamic_energy_j=dyn, static_energy_j=st,
        power_w=np.divide(en, lat, out=np.zeros(n), where=lat > 0), memory_bytes=np.full(n, required),
        capacity_bytes=capacity, fits=required <= capacity, power_capped_ops=capped, overrides=cols, method=method,
        looped_op_kinds=tuple(sorted(looped)), op_names=names, op_time_s=op_t, op_energy_j=op_e,
    )


def _slot_arrays(walk: Any, base: DeviceSpec | SystemSpec, dev: DeviceSpec, cols: dict[str, np.ndarray],
                 full: dict[str, str], n: int, opts: EvalOptions, ctx: LoweringContext, looped: set[str]
                 ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None]:
    """(time, dynamic J, static J, power-capped) arrays of each slot of the walk (None for a view)."""
    eff = dev.efficiency
    floor = eff.graph_launch_overhead_s if opts.cuda_graphs else eff.launch_overhead_s
    if opts.eager_framework:
        floor = np.maximum(floor, eff.framework_op_overhead_s)
    energy = EnergyCoefficients(dev)
    spec_i = _variant_specs(base, cols, n)
    blocked = frozenset().union(*(LOOPED_PATH_RULES.get(fp.removeprefix("device."), frozenset())
                                  for fp in full.values()))
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None] = []
    for slot in walk.slots:
        if slot.kind == VIEW:
            out.append(None)
            continue
        if slot.kind == FUSED:
            kc = fused_cost(slot.op, *slot.joined, ctx)
        else:
            kc = _lower_arrays(slot.op, slot.in_l2, ctx, base, spec_i, opts, n, looped, blocked)
        out.append(_record_arrays(kc, dev, energy, floor, opts, n, module_host_s(slot.modules, eff)))
    return out


def _lower_arrays(op: Op, in_l2: float, ctx: LoweringContext, base: DeviceSpec | SystemSpec,
                  spec_i: Callable[[int], Any], opts: EvalOptions, n: int, looped: set[str],
                  blocked: frozenset[str]) -> KernelCost:
    """The op's KernelCost with array fields: one call of an array-safe rule, else one call per variant."""
    rule = rule_name_for(ctx.device.kind, op.kind)
    if rule in ARRAY_SAFE_GPU_RULES and rule not in blocked:
        ctx.resident_bytes = in_l2
        try:
            return lower(op, ctx)
        except ValueError:  # some variant cannot run the op (no tile fits...): find it, variant by variant
            pass
    looped.add(op.kind)
    costs: list[KernelCost] = []
    for i in range(n):
        s = spec_i(i)
        d, _, cnt, fab = spec_of(s)
        c = LoweringContext(d, opts, fabric=fab, group_size=cnt, collectives=collectives_of(s),
                            nodes=int(getattr(s, "nodes", 1)), resident_bytes=in_l2)
        try:
            costs.append(lower(op, c))
        except ValueError as exc:
            raise VariantError(i, _variant_text(spec_i, i), f"op {op.name!r}: {exc}") from None
    arrays: dict[str, Any] = {f: np.array([getattr(c, f) for c in costs], dtype=float) for f in _COST_ARRAYS}
    kernels = {c.kernels for c in costs}
    # the launch floor multiplies by the kernel count: per variant where the variants differ in it
    arrays["kernels"] = kernels.pop() if len(kernels) == 1 else np.array([c.kernels for c in costs], dtype=float)
    return dataclasses.replace(costs[0], **arrays)


def _record_arrays(kc: KernelCost, dev: DeviceSpec, energy: EnergyCoefficients, floor: Any, opts: EvalOptions,
                   n: int, modules: Any = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(time, dynamic J, static J, power-capped) of one kernel cost per variant: the engine's
    per-op composition (kernel device time, launch floor, energy, TDP cap) element by element."""
    kernels = kc.kernels
    device_t = (np.maximum(kc.compute_s, kc.memory_s) + kc.latency_s) + kernel_device_s(kc, dev.efficiency)
    host = host_floor_s(kc.rule, kernels, floor, dev.efficiency, opts, modules)
    t = _vec(np.maximum(device_t, host), n)
    j_matrix = energy.per_flop(dev.energy.tensor_j_per_flop, kc.matrix_dtype, "tensor_j_per_flop")
    j_vector = energy.vector_per_flop(kc)
    traffic = {"dram": kc.dram_bytes, "l2": kc.l2_bytes, "smem": kc.smem_bytes}
    e_dyn = _vec(dynamic_energy(kc.matrix_flops, j_matrix, kc.vector_flops, j_vector, traffic, energy.per_byte), n)
    if dev.dvfs is not None and opts.power_cap:
        # the engine's DVFS path (simulator.engines.analytical, _record_values), element by element: over the
        # TDP the kernel runs at the clock that fits; arithmetic energy scales with V(f)^2, traffic does not
        floor_s = host
        k = dvfs_kernel(
            compute_s=_vec(kc.compute_s, n), memory_s=_vec(kc.memory_s, n),
            fixed_s=_vec(device_t - np.maximum(kc.compute_s, kc.memory_s), n), floor_s=_vec(floor_s, n),
            core_j=_vec(dynamic_energy(kc.matrix_flops, j_matrix, kc.vector_flops, j_vector, {}, {}), n),
            other_j=_vec(dynamic_energy(0.0, 0.0, 0.0, 0.0, traffic, energy.per_byte), n),
            ref_hz=_vec(dev.clock.sustained_hz, n), base_hz=_vec(dev.dvfs.base_hz, n),
            boost_hz=_vec(dev.clock.boost_hz, n), base_voltage_fraction=_vec(dev.dvfs.base_voltage_fraction, n),
            idle_w=_vec(dev.power.idle_w, n), tdp_w=_vec(dev.power.tdp_w, n))
        pos = t > 0
        capped = pos & np.asarray(k.power_capped, dtype=bool)
        time = np.where(capped, k.time_s, t)
        return time, np.where(capped, k.dynamic_j, e_dyn), np.where(pos, k.static_j, 0.0), capped
    est = kernel_energy(t, e_dyn, _vec(dev.power.idle_w, n), _vec(dev.power.tdp_w, n), cap=opts.power_cap)
    pos = t > 0
    time = np.where(pos, est.time_s, t)
    static = np.where(pos, est.static_j, 0.0)
    capped = pos & np.asarray(est.power_capped, dtype=bool)
    return time, e_dyn.copy(), static, capped


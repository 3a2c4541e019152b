"""Cost rules for the dense linear-algebra kinds (cholesky, qr, svd, eigh, matrix_inverse_root, triangular_solve).

Registered for ``"gpu"`` and ``"cpu"`` devices on import (listed in ``RULE_MODULES``); on ``"tpu"``
devices the kinds are refused with a located :class:`~workloads.ir.UnsupportedOpError` (no systolic
model of these algorithms exists here, and the roofline fallback would price them as one large GEMM,
far too fast).

Model
-----
Each op is lowered to the blocked algorithm LAPACK, cuSOLVER and MAGMA run (:func:`plan`), a sequence of
*pieces* of three sorts, priced one after another (they depend on each other):

* **level-3 updates** (trailing-matrix updates, applying block reflectors, divide-and-conquer merges):
  GEMMs ``m x n x k`` priced by the device's GEMM model at the op's dtype (``fp32`` on a GPU's SIMT
  units unless the spec has a tensor rate for it; ``fp64`` at the fp64 rate), times the fraction of the
  product a triangular update computes (``syrk``/``syr2k``/``trsm``: one half);
* **level-2 steps**: the sequential, memory-bound part: the panel factorisation of each of the ``n/nb``
  panels (``nb`` = ``efficiency.linalg_block_size``), and, in the two-sided reductions (``sytrd``,
  ``gebrd``), one matrix-vector product with the whole trailing matrix per column: half of their
  FLOPs (Dongarra, Sorensen & Hammarling, "Block reduction of matrices to condensed forms for
  eigenvalue computations", J. Comput. Appl. Math. 27 (1989); LAPACK Working Note 2) -- priced by the
  streaming model over the bytes each step moves, from the cache level holding its working set;
* **sweeps**: the implicit QR sweeps of the tridiagonal / bidiagonal eigen- or singular-value
  iteration, about two per eigenvalue (GvL 4th ed. s.8.3.5), each a dependent scalar chain over the
  rows of its active block, priced at ``efficiency.linalg_sweep_row_s`` per row (a measured LAPACK
  ``dsterf`` figure). On a GPU this part runs on the host (cuSOLVER's ``cusolverDnXsyevd`` takes a host
  workspace: cuSOLVER documentation), so it pays one launch floor for the round trip, not one per sweep.

On a GPU every piece is at least one kernel and takes its work plus ``efficiency.kernel_device_time_s``,
and at least the launch floor (``efficiency.launch_overhead_s``, or ``graph_launch_overhead_s`` with CUDA
graphs): thousands of dependent small kernels make small problems latency-bound. A column step of the
two-sided reductions is as many dependent kernels as reference LAPACK's panel routine makes BLAS calls per column
(:data:`LATRD_CALLS_PER_COLUMN`, :data:`LABRD_CALLS_PER_COLUMN`); a Cholesky panel is one kernel and a QR
panel one kernel per column (fused panel kernels). On a CPU the pieces are calls inside one LAPACK routine
and pay no per-call floor; the op pays ``efficiency.launch_overhead_s`` once. The op's ``every``
attribute divides the total (a preconditioner refreshed every ``every`` steps).

The op's FLOPs (``workloads.linalg``) are the textbook counts; ``matrix_flops`` of the cost are the
GEMM pieces' FLOPs where they run on a matrix unit (fp64 tensor cores; an fp32 GEMM runs on a GPU's
SIMT units unless TF32 is allowed) and ``vector_flops`` the rest.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwmodels import gpu
from hwmodels.spec import DeviceSpec
from simulator.lowering.common import KernelCost, LoweringContext, register_rule, require_rate
from simulator.lowering.cpu import gemm_efficiency, memory_time
from simulator.lowering.gpu import _gemm_cost
from workloads.ir import Op, UnsupportedOpError
from workloads.linalg import LINALG_KINDS, every_of, linalg_dims

__all__ = ["Gemm", "Level2", "Sweeps", "LinalgPlan", "plan", "panel_count", "gpu_linalg_cost", "cpu_linalg_cost",
           "linalg_breakdown", "SWEEPS_PER_EIGENVALUE", "DC_LEAF_SIZE", "LATRD_CALLS_PER_COLUMN",
           "LABRD_CALLS_PER_COLUMN"]

#: Implicit QR sweeps per eigenvalue (or singular value) of the tridiagonal (bidiagonal) iteration:
#: "on average only about two QR steps per eigenvalue" (GvL 4th ed. s.8.3.5).
SWEEPS_PER_EIGENVALUE = 2
#: Leaf size of LAPACK's divide and conquer (``SMLSIZ`` = 25, ILAENV ISPEC=9).
DC_LEAF_SIZE = 25
#: BLAS calls per column of the two-sided reductions' panel routines in reference LAPACK, each a
#: dependent kernel on a GPU: ``dlatrd.f`` (lower) makes 6 DGEMV, DSYMV, DLARFG, DSCAL, DDOT and DAXPY
#: calls per column; ``dlabrd.f`` (m >= n) 14 DGEMV, 2 DLARFG and 2 DSCAL.
LATRD_CALLS_PER_COLUMN = 11
LABRD_CALLS_PER_COLUMN = 18


@dataclass(frozen=True)
class Gemm:
    """A level-3 update: ``C[m,n] += A[m,k] B[k,n]`` of which ``fraction`` is computed (1/2: triangular),
    ``count`` independent products of this shape (one batched kernel on a GPU, one call each on a CPU)."""

    m: int
    n: int
    k: int
    fraction: float = 1.0
    what: str = ""
    count: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.fraction * self.count


@dataclass(frozen=True)
class Level2:
    """Dependent memory-bound steps: bytes moved, FLOPs and working set (bytes) of each step, per matrix.

    ``calls`` is the number of dependent library calls (GPU kernels) per step: the first carries the
    step's memory work, the others are short vector operations between them."""

    bytes: np.ndarray
    flops: np.ndarray
    working_set: np.ndarray
    what: str = ""
    calls: int = 1

    @property
    def steps(self) -> int:
        return int(self.bytes.size)


@dataclass(frozen=True)
class Sweeps:
    """Dependent scalar sweeps (tridiagonal/bidiagonal QR): rows of the active block of each sweep, per matrix."""

    rows: np.ndarray
    what: str = ""

    @property
    def steps(self) -> int:
        return int(self.rows.size)


@dataclass(frozen=True)
class LinalgPlan:
    """The pieces of one op's blocked algorithm, in execution order, for one matrix of the batch."""

    algorithm: str
    block_size: int
    panels: int
    pieces: tuple[Gemm | Level2 | Sweeps, ...] = field(default_factory=tuple)

    @property
    def gemms(self) -> tuple[Gemm, ...]:
        return tuple(p for p in self.pieces if isinstance(p, Gemm))

    @property
    def gemm_flops(self) -> float:
        return float(sum(g.flops for g in self.gemms))


def panel_count(n: int, nb: int) -> int:
    """Panels of width ``nb`` covering ``n`` columns: ``ceil(n / nb)``."""
    return -(-n // nb)


def _panels(k: int, nb: int) -> list[tuple[int, int]]:
    """(first column, width) of each panel."""
    return [(j, min(nb, k - j)) for j in range(0, k, nb)]


def _arr(x: list[float]) -> np.ndarray:
    return np.asarray(x, dtype=float)


# ------------------------------------------------------------------------------------------------
# algorithms


def _cholesky(n: int, nb: int, eb: float) -> list[Any]:
    """Right-looking blocked Cholesky (LAPACK dpotrf): per panel potf2 on the diagonal block, trsm below
    it, syrk on the trailing matrix (GvL 4th ed. s.4.2.9)."""
    out: list[Any] = []
    for j, w in _panels(n, nb):
        t = n - j - w
        out.append(Level2(_arr([2.0 * w * w * eb]), _arr([w**3 / 3.0]), _arr([w * w * eb]), "potf2"))
        if t > 0:
            out.append(Gemm(t, w, w, 0.5, "trsm"))
            out.append(Gemm(t, t, w, 0.5, "syrk"))
    return out


def _qr_panel_steps(r: int, w: int, eb: float) -> Level2:
    """Householder panel (geqr2/labrd-like) of ``r x w``: one column step each, reading and writing the panel."""
    i = np.arange(w, dtype=float)
    return Level2(np.full(w, 2.0 * r * w * eb), 4.0 * (r - i) * (w - i), np.full(w, r * w * eb), "geqr2")


def _geqrf(m: int, n: int, nb: int, eb: float) -> list[Any]:
    """Blocked Householder QR with compact WY block reflectors (Schreiber & Van Loan 1989; GvL s.5.2.3):
    per panel geqr2, then larfb on the trailing columns: W = V^T C, W = T W, C -= V W."""
    out: list[Any] = []
    for j, w in _panels(min(m, n), nb):
        r, t = m - j, n - j - w
        out.append(_qr_panel_steps(r, w, eb))
        if t > 0:
            out += [Gemm(w, t, r, 1.0, "larfb V^T C"), Gemm(w, t, w, 0.5, "larfb T W"), Gemm(r, t, w, 1.0, "larfb C-VW")]
    return out


def _orgqr(m: int, cols: int, k: int, nb: int) -> list[Any]:
    """Forming ``cols`` columns of Q from ``k`` reflectors by blocked backward accumulation (dorgqr/dormqr)."""
    out: list[Any] = []
    for j, w in reversed(_panels(k, nb)):
        r, c = m - j, cols - j
        if c > 0:
            out += [Gemm(w, c, r, 1.0, "orgqr V^T Q"), Gemm(r, c, w, 1.0, "orgqr Q-VW")]
    return out


def _sytrd(n: int, nb: int, eb: float) -> list[Any]:
    """Blocked tridiagonalisation (LAPACK dsytrd + dlatrd): per column a symv with the trailing matrix
    and gemvs with the panel's V and W (level 2), per panel a syr2k of the trailing matrix (level 3)."""
    out: list[Any] = []
    for j, w in _panels(max(n - 1, 0), nb):
        r = n - j
        i = np.arange(w, dtype=float)
        ri = r - i
        out.append(Level2(eb * (ri * ri / 2.0 + 4.0 * ri * i), 2.0 * ri * ri + 8.0 * ri * i, eb * ri * ri, "latrd",
                          LATRD_CALLS_PER_COLUMN))
        t = r - w
        if t > 0:
            out.append(Gemm(t, t, 2 * w, 0.5, "syr2k"))
    return out


def _gebrd(m: int, n: int, nb: int, eb: float) -> list[Any]:
    """Blocked bidiagonalisation (LAPACK dgebrd + dlabrd), ``m >= n``: per column two gemvs with the
    trailing matrix (level 2), per panel two GEMM updates A -= V Y^T + X U^T (level 3)."""
    out: list[Any] = []
    for j, w in _panels(n, nb):
        i = np.arange(w, dtype=float)
        rm, rn = m - j - i, n - j - i
        out.append(Level2(eb * 2.0 * rm * rn, 4.0 * rm * rn, eb * rm * rn, "labrd", LABRD_CALLS_PER_COLUMN))
        tm, tn = m - j - w, n - j - w
        if tm > 0 and tn > 0:
            out += [Gemm(tm, tn, w, 1.0, "gebrd V Y^T"), Gemm(tm, tn, w, 1.0, "gebrd X U^T")]
    return out


def _sweeps(n: int, eb: float, vec_rows: int = 0, vec_flops: float = 0.0, what: str = "steqr") -> list[Any]:
    """Implicit QR sweeps on active blocks shrinking from ``n`` to 1 (two per eigenvalue). With
    ``vec_rows`` > 0 the rotations are accumulated into vectors of that many rows: ``vec_flops`` in all,
    spread in proportion to the block size, each sweep streaming the active columns (level 2)."""
    s = np.repeat(np.arange(n, 0, -1, dtype=float), SWEEPS_PER_EIGENVALUE)
    out: list[Any] = [Sweeps(s, what)]
    if vec_rows and vec_flops > 0:
        share = vec_flops * s / s.sum()
        out.append(Level2(2.0 * eb * vec_rows * s, share, eb * vec_rows * s, f"{what} rotations"))
    return out


def _stedc(n: int, eb: float) -> list[Any]:
    """Divide and conquer with eigenvectors (LAPACK dstedc, Cuppen): at each level the merges multiply the
    two halves' eigenvectors by the secular eigenvectors, two GEMMs (s/2 x s x s/2) per merge of size s
    (``4n^3/3`` in all without deflation); each merge also writes its s x s secular eigenvector matrix."""
    out: list[Any] = []
    levels = max(0, math.ceil(math.log2(max(n, 1) / DC_LEAF_SIZE))) if n > DC_LEAF_SIZE else 0
    leaf = -(-n // (2**levels))
    out += _sweeps(leaf, eb, what="leaf steqr")  # the leaves are solved side by side
    for lv in reversed(range(levels)):
        merges = 2**lv
        s = -(-n // merges)
        h = -(-s // 2)
        out.append(Level2(_arr([s * s * eb * merges]), _arr([0.0]), _arr([s * s * eb * merges]), "secular"))
        out += [Gemm(h, s, h, 1.0, "stedc merge", merges)] * 2
    return out


def plan(op: Op, block_size: int) -> LinalgPlan:
    """The blocked algorithm of ``op`` for one matrix of its batch (see the module docstring)."""
    _, m, n = linalg_dims(op)
    eb = op.inputs[0].dtype.bits / 8.0
    nb = max(1, int(block_size))
    a = op.attrs
    kind = op.kind
    pieces: list[Any]
    if kind == "cholesky":
        pieces, alg, panels = _cholesky(n, nb, eb), "potrf", panel_count(n, nb)
    elif kind == "qr":
        k = min(m, n)
        pieces = _geqrf(m, n, nb, eb)
        mode = a.get("mode", "reduced")
        if mode != "r":
            pieces += _orgqr(m, k if mode == "reduced" else m, k, nb)
        alg, panels = "geqrf" + ("" if mode == "r" else "+orgqr"), panel_count(k, nb)
    elif kind == "triangular_solve":
        r = op.inputs[1].shape[-1]
        pieces = []
        for j, w in _panels(n, nb):
            pieces.append(Level2(_arr([2.0 * w * r * eb]), _arr([float(w * w * r)]), _arr([w * (w + r) * eb]), "trsm diag"))
            if n - j - w > 0:
                pieces.append(Gemm(n - j - w, r, w, 1.0, "trsm update"))
        alg, panels = "trsm", panel_count(n, nb)
    elif kind in ("eigh", "matrix_inverse_root"):
        method = a.get("method", "eigh") if kind == "matrix_inverse_root" else "eigh"
        if method == "newton":
            p, iters = int(a["p"]), int(a["iterations"])
            pieces = []
            for _ in range(iters):
                pieces.append(Level2(_arr([2.0 * n * n * eb]), _arr([2.0 * n * n]), _arr([2.0 * n * n * eb]), "T=((p+1)I-M)/p"))
                pieces += [Gemm(n, n, n, 1.0, "newton")] * (p + 1)
            return LinalgPlan("coupled-newton", nb, 0, tuple(pieces))
        vectors = bool(a.get("vectors", True)) if kind == "eigh" else True
        pieces = _sytrd(n, nb, eb)
        if vectors:
            pieces += _stedc(n, eb) + _orgqr_apply(n, n, nb)
        else:
            pieces += _sweeps(n, eb, what="sterf")
        alg = "syevd" if vectors else "syevd-values"
        if kind == "matrix_inverse_root":
            pieces += [Level2(_arr([2.0 * n * n * eb]), _arr([float(n * n)]), _arr([n * n * eb]), "scale columns"),
                       Gemm(n, n, n, 1.0, "Q D Q^T")]
            alg = "syevd+root"
        panels = panel_count(max(n - 1, 1), nb)
    elif kind == "svd":
        mm, nn = max(m, n), min(m, n)
        vec = a.get("vectors", "reduced")
        pieces = _gebrd(mm, nn, nb, eb)
        from workloads.linalg import orgqr_flops, svd_flops

        if vec == "none":
            pieces += _sweeps(nn, eb, what="bdsqr")
        else:
            ucols = nn if vec == "reduced" else mm
            pieces += _orgqr(mm, ucols, nn, nb) + _orgqr(nn, nn, nn, nb)
            rot = svd_flops(mm, nn, vec) - svd_flops(mm, nn, "none") - orgqr_flops(mm, ucols, nn) - orgqr_flops(nn, nn, nn)
            pieces += _sweeps(nn, eb, vec_rows=ucols + nn, vec_flops=max(0.0, float(rot)), what="bdsqr")
        alg, panels = "gesvd" + ("-values" if vec == "none" else f"-{vec}"), panel_count(nn, nb)
    else:  # pragma: no cover - only registered kinds reach here
        raise UnsupportedOpError(f"op {op.name!r}: no linear-algebra plan for kind {op.kind!r}")
    return LinalgPlan(alg, nb, panels, tuple(pieces))


def _orgqr_apply(n: int, cols: int, nb: int) -> list[Any]:
    """Back-transformation of the eigenvectors by sytrd's reflectors (dormtr): per panel two GEMMs on all
    ``cols`` columns (``2 n^3`` in all)."""
    out: list[Any] = []
    for j, w in reversed(_panels(max(n - 1, 0), nb)):
        r = n - j
        out += [Gemm(w, cols, r, 1.0, "ormtr V^T Z"), Gemm(r, cols, w, 1.0, "ormtr Z-VW")]
    return out


# ------------------------------------------------------------------------------------------------
# GPU


def _launch_floor(device: DeviceSpec, options: Any) -> float:
    eff = device.efficiency
    return float(eff.graph_launch_overhead_s if getattr(options, "cuda_graphs", False) else eff.launch_overhead_s)


@dataclass
class _Acc:
    compute_s: float = 0.0
    memory_s: float = 0.0
    time_s: float = 0.0
    dram: float = 0.0
    l2: float = 0.0
    smem: float = 0.0
    kernels: int = 0
    matrix_flops: float = 0.0
    gemm_s: float = 0.0
    level2_s: float = 0.0
    sweep_s: float = 0.0


def gpu_linalg_cost(op: Op, ctx: LoweringContext) -> KernelCost:
    """Cost of a linear-algebra op on a GPU (see the module docstring)."""
    acc, pl, gemm_dtype, batch = _gpu_parts(op, ctx)
    # the pieces hold their per-kernel device time (each is at least the launch floor)
    return _finish(op, pl, acc, gemm_dtype, batch, rule=f"linalg-{pl.algorithm}", kernel_time_included=True)


def linalg_breakdown(op: Op, ctx: LoweringContext) -> dict[str, float]:
    """Seconds (before ``every`` amortisation) of the GEMM pieces, the level-2 steps and the sweeps of
    ``op`` on ``ctx.device``, and the number of pieces (``kernels``; GPU only)."""
    if ctx.device.kind == "gpu":
        acc, *_ = _gpu_parts(op, ctx)
    else:
        acc, *_ = _cpu_parts(op, ctx)
    return {"gemm_s": acc.gemm_s, "level2_s": acc.level2_s, "sweep_s": acc.sweep_s, "total_s": acc.time_s,
            "kernels": float(acc.kernels)}


def _gpu_parts(op: Op, ctx: LoweringContext) -> tuple[_Acc, LinalgPlan, str, int]:
    dev = ctx.device
    dt = op.dtype.value
    require_rate(dev, dt, op)
    batch, _, _ = linalg_dims(op)
    pl = plan(op, dev.efficiency.linalg_block_size)
    eb = op.inputs[0].dtype.bits / 8.0
    floor = _launch_floor(dev, ctx.options)
    # each piece: its work plus the per-kernel device time, at least the floor
    gap = float(dev.efficiency.kernel_device_time_s)
    p32 = ctx.params("fp32")
    vec = dev.compute.vector_flops_per_s
    pv = dataclasses.replace(p32, vector_flops_per_s=vec.get(dt, p32.vector_flops_per_s))
    acc = _Acc()
    cache: dict[tuple[int, int, int, int], KernelCost] = {}
    gemm_dtype = ""
    for piece in pl.pieces:
        if isinstance(piece, Gemm):
            key = (piece.m, piece.n, piece.k, piece.count)
            if key not in cache:
                cache[key] = _gemm_cost(ctx, piece.m, piece.n, piece.k, batch=batch * piece.count, dtype=dt,
                                        in_bytes=eb, out_bytes=eb, b_shared=False, rule="linalg")
            g = cache[key]
            f = piece.fraction
            t = max(g.device_time_s * f + gap, floor)
            acc.compute_s += g.compute_s * f
            acc.memory_s += g.memory_s * f
            acc.time_s += t
            acc.gemm_s += t
            acc.dram += g.dram_bytes * f
            acc.l2 += g.l2_bytes * f
            acc.smem += g.smem_bytes * f
            acc.kernels += 1
            acc.matrix_flops += g.matrix_flops * f
            gemm_dtype = g.matrix_dtype or gemm_dtype
        elif isinstance(piece, Level2):
            by = piece.bytes * batch
            res = np.where(piece.working_set * batch <= float(np.max(p32.l2_capacity_bytes)), by / 2.0, 0.0)
            e = gpu.streaming(by / 2.0, by / 2.0, piece.flops * batch, pv, l2_resident_bytes=res)
            ts = np.maximum(np.asarray(e.time_s, dtype=float) + gap, floor) + (piece.calls - 1) * max(floor, gap)
            acc.compute_s += float(np.sum(e.compute_s))
            acc.memory_s += float(np.sum(e.memory_s))
            acc.time_s += float(ts.sum())
            acc.level2_s += float(ts.sum())
            acc.dram += float(np.sum(e.dram_bytes))
            acc.l2 += float(np.sum(e.l2_bytes))
            acc.kernels += piece.steps * piece.calls
        else:  # sweeps: a dependent scalar chain on the host, one round trip
            t_chain = float(piece.rows.sum()) * batch * float(dev.efficiency.linalg_sweep_row_s)
            acc.compute_s += t_chain
            acc.time_s += t_chain + max(floor, gap)
            acc.sweep_s += t_chain + max(floor, gap)
            acc.kernels += 1
    return acc, pl, gemm_dtype, batch


def _finish(op: Op, pl: LinalgPlan, acc: _Acc, gemm_dtype: str, batch: int, rule: str,
            kernel_time_included: bool = False) -> KernelCost:
    e = float(every_of(op.attrs))
    mf = acc.matrix_flops / e
    kernels = max(1, math.ceil(acc.kernels / e))
    total = acc.time_s / e
    comp, mem = acc.compute_s / e, acc.memory_s / e
    notes = (f"nb={pl.block_size}, {pl.panels} panels; gemm {acc.gemm_s / e * 1e3:.4g} ms, level-2 "
             f"{acc.level2_s / e * 1e3:.4g} ms, sweeps {acc.sweep_s / e * 1e3:.4g} ms"
             + (f"; amortised over {int(e)} steps" if e > 1 else "") + (f"; batch {batch}" if batch > 1 else ""))
    return KernelCost(
        compute_s=comp, memory_s=mem, latency_s=max(0.0, total - max(comp, mem)),
        dram_bytes=acc.dram / e, l2_bytes=acc.l2 / e, smem_bytes=acc.smem / e,
        matrix_flops=mf, vector_flops=max(0.0, float(op.flops) - mf), rule=rule, matrix_dtype=gemm_dtype if mf else "",
        tile=f"nb{pl.block_size}x{pl.panels}", kernels=kernels, notes=notes, kernel_time_included=kernel_time_included,
    )


# ------------------------------------------------------------------------------------------------
# CPU


def cpu_linalg_cost(op: Op, ctx: LoweringContext) -> KernelCost:
    """Cost of a linear-algebra op on a CPU: the same pieces, GEMMs at the BLAS efficiency of their
    shape (``cpu.gemm_peak_fraction`` and the small-side factors; ``efficiency.tensor_peak_fraction``
    without a ``cpu`` section), level-2 steps at the bandwidth of the cache level holding their working
    set, sweeps at ``efficiency.linalg_sweep_row_s`` per row; one ``efficiency.launch_overhead_s`` per op."""
    acc, pl, batch = _cpu_parts(op, ctx)
    dt = op.dtype.value
    kc = _finish(op, pl, acc, dt if ctx.device.compute.tensor_flops_per_s.get(dt) else "", batch,
                 rule=f"cpu-lapack-{pl.algorithm}")
    return dataclasses.replace(kc, latency_s=kc.latency_s + ctx.device.efficiency.launch_overhead_s, kernels=1)


def _cpu_parts(op: Op, ctx: LoweringContext) -> tuple[_Acc, LinalgPlan, int]:
    dev = ctx.device
    dt = op.dtype.value
    require_rate(dev, dt, op)
    eff = dev.efficiency
    batch, _, _ = linalg_dims(op)
    pl = plan(op, eff.linalg_block_size)
    tensor = dev.compute.tensor_flops_per_s
    rate = tensor.get(dt, dev.compute.vector_flops_per_s.get(dt, 0.0))
    vrate = dev.compute.vector_flops_per_s.get(dt, rate) * eff.vector_peak_fraction
    acc = _Acc()
    for piece in pl.pieces:
        if isinstance(piece, Gemm):
            e = (gemm_efficiency(dev.cpu, piece.m, piece.n, piece.k) if dev.cpu is not None
                 else eff.tensor_peak_fraction)
            t = piece.flops * batch / (rate * e)
            by = ((piece.m * piece.k + piece.k * piece.n + 2 * piece.m * piece.n) * piece.fraction * piece.count * batch
                  * op.inputs[0].dtype.bits / 8)
            tm, cached, main, _ = memory_time(dev, by, by)
            acc.compute_s += t
            acc.memory_s += tm
            acc.time_s += max(t, tm)
            acc.gemm_s += max(t, tm)
            acc.dram += main
            acc.l2 += cached
            acc.matrix_flops += piece.flops * batch
        elif isinstance(piece, Level2):
            for by, fl, ws in zip(piece.bytes * batch, piece.flops * batch, piece.working_set * batch, strict=True):
                tm, cached, main, _ = memory_time(dev, float(by), float(ws))
                tc = float(fl) / vrate
                acc.compute_s += tc
                acc.memory_s += tm
                acc.time_s += max(tc, tm)
                acc.level2_s += max(tc, tm)
                acc.dram += main
                acc.l2 += cached
        else:
            t_chain = float(piece.rows.sum()) * batch * float(eff.linalg_sweep_row_s)
            acc.compute_s += t_chain
            acc.time_s += t_chain
            acc.sweep_s += t_chain
    return acc, pl, batch


# ------------------------------------------------------------------------------------------------
# registration


@register_rule("gpu", *LINALG_KINDS)
def _gpu_linalg(op: Op, ctx: LoweringContext) -> KernelCost:
    return gpu_linalg_cost(op, ctx)


@register_rule("cpu", *LINALG_KINDS)
def _cpu_linalg(op: Op, ctx: LoweringContext) -> KernelCost:
    return cpu_linalg_cost(op, ctx)


@register_rule("tpu", *LINALG_KINDS)
def _tpu_linalg(op: Op, ctx: LoweringContext) -> KernelCost:
    raise UnsupportedOpError(
        f"op {op.name!r} ({op.kind}): no cost model for dense linear algebra on {ctx.device.kind} device "
        f"{ctx.device.name!r}; got a {op.kind} op; expected a gpu or cpu device (a systolic array runs these "
        "algorithms as iterative methods the roofline fallback cannot price)")

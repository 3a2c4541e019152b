"""Closed-form cycle, utilisation, SRAM and DRAM model of a TPU-style systolic array, numpy-broadcast.

The compute side reproduces SCALE-Sim v3 (``scalesim==3.0.0``) exactly; the memory side is this
project's own double-buffering model (SCALE-Sim's is described below and differs on purpose).

GEMM view
---------
A layer is the product ``O[M, N] = I[M, K] @ W[K, N]``: for a convolution ``M`` is the number of
output pixels of one filter (``E_h * E_w``), ``N`` the number of filters and ``K`` the window size
(``R * S * C``); a GEMM row ``name, M, N, K`` is taken as is. Each dataflow maps two of the three
dimensions onto the array and streams the third in time (SCALE-Sim's ``S_r, S_c, T``)::

    dataflow  stationary   S_r (rows)   S_c (cols)   T (time)
    os        outputs      M            N            K
    ws        weights      K            N            M
    is        inputs       K            M            N

Folds and cycles
----------------
An ``R x C`` array covers ``S_r x S_c`` in ``ceil(S_r/R) * ceil(S_c/C)`` folds, visited with the
column fold outermost. Every fold runs the full-array schedule (partial tiles are padded):

- output stationary: ``T`` streaming cycles plus ``R + C - 2`` skew cycles (operands ramp in over
  the rows and columns); results leave through a drain path in the shadow of the next fold;
- weight / input stationary: ``R`` cycles to preload the stationary tile, then ``T`` streaming
  cycles plus ``R + C - 2`` skew cycles until the last partial sum leaves the bottom edge.

``compute_cycles`` is SCALE-Sim's "Total Cycles" without stalls: ``folds * fold_cycles - 1`` (it
reports the index of the last busy cycle, counted from zero).

Utilisation (percent, SCALE-Sim's definitions)
----------------------------------------------
- overall: ``100 * M*N*K / (total_cycles * R * C)`` (``total_cycles == compute_cycles`` with
  ideal memory, as in SCALE-Sim's default mode);
- mapping efficiency: mean over folds of the fraction of PEs holding work;
- compute utilisation: mean over folds of ``MACs / (R * C * L)`` with ``L = T + R + C - 2`` for
  os and ``L = 2R + 2C + T - 3`` for ws/is (SCALE-Sim counts the column skew once more there
  than the fold actually lasts; kept for parity).

SRAM accesses (words, SCALE-Sim's counts)
-----------------------------------------
- os: ifmap ``M*K*ceil(N/C)``, filter ``K*N*ceil(M/R)``, ofmap writes ``M*N + folds*(R + C)``
  (SCALE-Sim adds ``R + C`` per fold to its output-stationary write counter; the array itself
  writes ``M*N`` words);
- ws: ifmap ``M*K*ceil(N/C)``, filter ``K*N``, ofmap writes ``M*N*ceil(K/R)`` (partial sums);
- is: ifmap ``M*K``, filter ``K*N*ceil(M/C)``, ofmap writes ``M*N*ceil(K/R)``.

``sram_ofmap_reads`` (ours; SCALE-Sim does not count them) is the partial-sum read-back needed to
accumulate across the ``ceil(K/R)`` row folds of ws/is: ``M*N*(ceil(K/R) - 1)``.

Memory model (ours)
-------------------
Three double-buffered scratchpads (ifmap, filter, ofmap) of ``sram_words`` words each sit between
the array and a DRAM of ``dram_words_per_cycle`` words per cycle shared by the three operands.
Folds are visited column-fold outermost, so an operand tile indexed only by the row fold (os ifmap,
ws ifmap, is filter) is re-read from DRAM once per column fold unless the whole operand fits in its
scratchpad; a tile indexed only by the column fold (os filter) is read once if it fits, else once
per row fold; a tile
indexed by both (ws filter, is ifmap) is read once. A ws/is partial-sum block (``M x C`` or
``C x N``) accumulates on chip when it fits in the ofmap scratchpad, otherwise partial sums spill to
DRAM and are read back. ifmap traffic counts distinct ifmap words (for a convolution the input
pixels the windows touch, not the ``M*K`` im2col copies; halo re-reads between adjacent tiles are
neglected). Operands are fetched while they stream and results written while the next fold
computes, so DRAM traffic overlaps compute except for what cannot: the first stationary tile of
ws/is, which must be on chip before its preload (``prefetch_cycles``), and the last output tile of
os, which exists only when the last fold ends (``drain_cycles``). With ``W`` words per cycle::

    overlapped   = dram_words - first_stationary_tile - last_os_output_tile
    stall_cycles = max(0, ceil(overlapped / W) - compute_cycles)
    total_cycles = compute_cycles + stall_cycles + prefetch_cycles + drain_cycles
    bound        = "memory" if ceil(dram_words / W) > compute_cycles else "compute"

Without a DRAM bandwidth (``dram_words_per_cycle=None``) memory is ideal: no stalls, no prefetch,
``total_cycles == compute_cycles``, which is what SCALE-Sim reports in its default CALC mode.

Energy
------
:func:`systolic_energy` prices a run's counts with the sourced coefficients of
``catalog/defaults/systolic_energy.toml`` (45 nm; :func:`load_systolic_energy` overlays a file or
single fields), all in float64 and broadcasting like the counts::

    mac      = macs * (multiply + accumulate)[dtype]
    register = 2 * macs * word_bytes * register_j_per_byte        (two operands hop PE to PE per MAC)
    sram     = sum over ifmap, filter, ofmap of bytes * sram_j_per_byte(capacity of that scratchpad)
               (array reads and writes as counted above, plus the DRAM fills and spills they exchange)
    dram     = dram words * word_bytes * dram_j_per_byte
    static   = (pe_static_w * rows * cols + other_static_w) * total_cycles / clock_hz

The SRAM energy per byte is a power law in the capacity between published sizes (straight lines on
log-log axes). Nothing here changes a cycle or a count.

Arithmetic range
----------------
Counts are int64 while every product the model forms (``M*N*K*100``, ``total_cycles * R * C``, the
DRAM words over a small bandwidth...) provably fits; beyond that (a 10^6 x 10^6 array, a layer of
10^9 on each side, a bandwidth of 10^-9 words per cycle) the same formulas run on Python integers
(numpy object arrays), which cannot wrap, and ratios are taken as exact integer quotients rounded once
to float. Results are then object arrays of Python ints (and float64 percentages): never negative,
NaN or wrapped. There is no size limit. Two documented edge cases: SCALE-Sim's fold-by-fold float
summation (``fold_average="scalesim"``) is replayed for layers of up to :data:`SCALESIM_FOLD_LOOP_MAX`
folds and replaced by the exact mean above that (SCALE-Sim itself would run for days there); and a
layer whose ``total_cycles`` is 0 (a 1 x 1 x 1 GEMM on a 1 x 1 output-stationary array, SCALE-Sim's
"index of the last busy cycle") takes 1 cycle in the overall utilisation, not a division by zero.

How SCALE-Sim's memory model differs, and why ours is the one to use
--------------------------------------------------------------------
In its USER-bandwidth mode SCALE-Sim's read buffer (``memory/read_buffer.py``)

(a) on a miss advances a circular prefetch window over the operand's whole address stream,
    fetching every line it passes until the missing address is in the active half, so an operand
    re-used across folds (the os filter tile, re-read for each row fold) is fetched again and
    again around the ring;
(b) adds each positive stall twice (``offset += potential_stall_cycles`` followed by
    ``if potential_stall_cycles > 0: offset += potential_stall_cycles``) and lets negative ones
    pull later requests earlier;
(c) feeds the ifmap and filter buffers at ``IfmapSRAMBankBandwidth`` / ``FilterSRAMBankBandwidth``
    from the ``[layout]`` section rather than at the configured ``Bandwidth``;
(d) counts DRAM reads in whole request lines, padding included.

Its CALC mode reports no stalls at all and a "Total Cycles (incl. prefetch)" derived from estimated
prefetch traces.

Worked example (checked in ``tests/hwmodels/test_systolic_memory.py``): a 64 x 64 x 64 GEMM on an
8 x 8 array, output stationary, 1 KiB (1024-word) ifmap/filter/ofmap scratchpads, 10 words/cycle.
The compute takes 64 folds of ``64 + 8 + 8 - 2 = 78`` cycles, ``compute_cycles = 4991``. The ifmap
(4096 words) does not fit in 1024 words and is re-read for each of the 8 column folds: 32768 words;
each 64 x 8 filter tile (512 words, half the scratchpad) fits and is read once: 4096 words; outputs
4096 words. DRAM moves 40960 words = 4096 cycles at 10 words/cycle, fewer than the 4991 compute
cycles, so with double buffering the layer is compute-bound: no stall; only the last fold's 64
outputs are exposed (7 drain cycles), 4998 cycles in all. SCALE-Sim 3.0.0 in USER mode with the
same scratchpads and 10 words/cycle per operand (three times our shared bandwidth) reports 19,001
stall cycles (23,992 total) and 235,560 filter DRAM reads for a 4,096-word filter (57 times over,
from (a)), its stalls inflated by (b). A DRAM that needs fewer cycles for a layer's traffic than the
array needs for its compute cannot stall a double-buffered array whose tiles fit in half a
scratchpad; those stalls are an artefact of the simulator, not of the hardware.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nodeperf.errors import NodeperfError

__all__ = [
    "DATAFLOWS",
    "SCALESIM_FOLD_LOOP_MAX",
    "SystolicError",
    "SystolicResult",
    "ConvView",
    "gemm_view",
    "conv_gemm_view",
    "gemm_cycles",
    "conv_cycles",
    "DEFAULT_ENERGY_FILE",
    "HOPS_PER_MAC",
    "SystolicEnergyError",
    "SystolicEnergyParams",
    "SystolicEnergy",
    "load_systolic_energy",
    "sram_j_per_byte",
    "operand_words",
    "dtype_for_word_bytes",
    "systolic_energy",
]

logger = logging.getLogger(__name__)

DATAFLOWS: tuple[str, ...] = ("os", "ws", "is")
#: Layers with more folds than this get the exact fold mean instead of SCALE-Sim's float loop (bounded time).
SCALESIM_FOLD_LOOP_MAX = 1 << 20
#: Products below this magnitude are computed in int64; above it in Python integers (see "Arithmetic range").
_INT64_SAFE = float(2**62)

FoldAverage = Literal["exact", "scalesim"]


class SystolicError(NodeperfError, ValueError):
    """Invalid input to the systolic-array model; the message names the argument and the value."""


@dataclass(frozen=True)
class ConvView:
    """GEMM view of a convolution, as SCALE-Sim defines it (no padding: give the padded input).

    Attributes
    ----------
    m, n, k
        Output pixels per filter, filters, window size ``filter_h * filter_w * channels``.
    ofmap_h, ofmap_w
        Output height and width, ``ceil((H - R + stride) / stride)``: as in SCALE-Sim, a last
        window that overhangs the input edge still produces an output.
    ifmap_words
        Distinct input words the windows touch (words; at most ``H * W * C``).
    """

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    ofmap_h: np.ndarray
    ofmap_w: np.ndarray
    ifmap_words: np.ndarray


@dataclass(frozen=True)
class SystolicResult:
    """Per-layer figures of one dataflow on one array geometry; every field broadcasts.

    All counts are integers (``int64`` arrays, or object arrays of Python ints where a count could
    exceed int64: see "Arithmetic range" in the module docstring), percentages are ``float64``.
    Cycle fields are array clock cycles; access counts are words.

    Attributes
    ----------
    dataflow
        ``"os"``, ``"ws"`` or ``"is"``.
    rows, cols
        Array geometry (PEs).
    m, n, k
        GEMM view of the layer.
    sr, sc, t
        Spatial rows, spatial columns and temporal extent for the dataflow.
    row_folds, col_folds, folds
        ``ceil(sr / rows)``, ``ceil(sc / cols)`` and their product.
    fold_cycles
        Cycles of one fold: ``preload + t + rows + cols - 2``.
    preload_cycles, skew_cycles, stream_cycles
        Whole-layer split of the fold cycles: stationary-tile preload (ws/is: ``rows`` per fold),
        pipeline fill/drain skew (``rows + cols - 2`` per fold), streaming (``t`` per fold).
    compute_cycles
        SCALE-Sim's stall-free "Total Cycles": ``folds * fold_cycles - 1``.
    macs
        Multiply-accumulates, ``m * n * k``.
    overall_util_pct, mapping_eff_pct, compute_util_pct
        SCALE-Sim's utilisation figures (percent), overall taken over ``total_cycles``.
    sram_ifmap_reads, sram_filter_reads, sram_ofmap_writes
        SCALE-Sim's SRAM access counts (words).
    sram_ofmap_reads
        Partial-sum read-back for accumulation across row folds (ws/is; words).
    dram_ifmap_reads, dram_filter_reads, dram_ofmap_writes, dram_ofmap_reads
        DRAM traffic of the double-buffered scratchpads (words).
    prefetch_cycles, drain_cycles, stall_cycles
        Exposed load of the first stationary tile (ws/is), exposed store of the last output tile
        (os), and compute waiting on DRAM (cycles).
    memory_cycles
        ``ceil(dram_words / dram_words_per_cycle)`` (cycles; 0 with ideal memory).
    total_cycles
        ``compute_cycles + stall_cycles + prefetch_cycles + drain_cycles``.
    bound
        ``"memory"`` where ``memory_cycles > compute_cycles``, else ``"compute"``.
    """

    dataflow: str
    rows: np.ndarray
    cols: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    sr: np.ndarray
    sc: np.ndarray
    t: np.ndarray
    row_folds: np.ndarray
    col_folds: np.ndarray
    folds: np.ndarray
    fold_cycles: np.ndarray
    preload_cycles: np.ndarray
    skew_cycles: np.ndarray
    stream_cycles: np.ndarray
    compute_cycles: np.ndarray
    macs: np.ndarray
    overall_util_pct: np.ndarray
    mapping_eff_pct: np.ndarray
    compute_util_pct: np.ndarray
    sram_ifmap_reads: np.ndarray
    sram_filter_reads: np.ndarray
    sram_ofmap_writes: np.ndarray
    sram_ofmap_reads: np.ndarray
    dram_ifmap_reads: np.ndarray
    dram_filter_reads: np.ndarray
    dram_ofmap_writes: np.ndarray
    dram_ofmap_reads: np.ndarray
    prefetch_cycles: np.ndarray
    drain_cycles: np.ndarray
    stall_cycles: np.ndarray
    memory_cycles: np.ndarray
    total_cycles: np.ndarray
    bound: np.ndarray


def _positive_ints(name: str, value: object) -> np.ndarray:
    """``value`` as an int64 array (an object array of Python ints where an element exceeds int64),
    after checking every element is an integer >= 1."""
    arr = np.asarray(value)
    kind = arr.dtype.kind
    if kind == "O":
        flat = arr.ravel().tolist()
        if not all(isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_) for x in flat):
            raise SystolicError(f"systolic: {name} must be integers >= 1; got {value!r}")
        arr = np.array([int(x) for x in flat] or [], dtype=object).reshape(arr.shape)
    elif kind == "b" or kind not in "iuf":
        raise SystolicError(f"systolic: {name} must be integers >= 1; got {value!r}")
    elif kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
            raise SystolicError(f"systolic: {name} must be integers >= 1; got {value!r}")
    if arr.size and min(arr.ravel().tolist()) < 1:
        raise SystolicError(
            f"systolic: {name} must be integers >= 1; got {min(arr.ravel().tolist())} (smallest element)"
        )
    if kind in "uf" or kind == "O":
        if arr.size and max(arr.ravel().tolist()) > np.iinfo(np.int64).max:
            return np.array([int(x) for x in arr.ravel().tolist()], dtype=object).reshape(arr.shape)
    return arr.astype(np.int64)


def _is_exact(*arrays: np.ndarray) -> bool:
    return any(a.dtype == object for a in arrays)


def _to_exact(*arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays as object arrays of Python ints (exact, unbounded integer arithmetic)."""
    return [a if a.dtype == object else np.array(a.tolist(), dtype=object).reshape(a.shape) for a in arrays]


def _largest(a: np.ndarray) -> float:
    return float(max(a.ravel().tolist())) if a.size else 0.0


def _ceil_by_rate(words: np.ndarray, rate: np.ndarray, exact: bool) -> np.ndarray:
    """``ceil(words / rate)`` per element (0 where the rate is infinite): cycles to move ``words``."""
    if not exact:
        return np.ceil(words / rate).astype(np.int64)

    def one(w: int, r: float) -> int:
        if math.isinf(r):
            return 0
        num, den = float(r).as_integer_ratio()  # the float rate exactly, so the ceiling is exact
        return -(-int(w) * den // num)

    return np.frompyfunc(one, 2, 1)(words, rate).astype(object)


def _check_dataflow(dataflow: str) -> str:
    if dataflow not in DATAFLOWS:
        raise SystolicError(
            f"systolic: unknown dataflow; got {dataflow!r}; expected one of {', '.join(DATAFLOWS)}"
        )
    return dataflow


def _ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return -(-a // b)


def gemm_view(
    dataflow: str, m: np.ndarray, n: np.ndarray, k: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spatial rows, spatial columns and temporal extent ``(S_r, S_c, T)`` of a dataflow.

    Parameters
    ----------
    dataflow
        ``"os"`` (``(M, N, K)``), ``"ws"`` (``(K, N, M)``) or ``"is"`` (``(K, M, N)``).
    m, n, k
        GEMM dimensions (counts, broadcastable).
    """
    _check_dataflow(dataflow)
    if dataflow == "os":
        return m, n, k
    if dataflow == "ws":
        return k, n, m
    return k, m, n


def conv_gemm_view(
    ifmap_h: object,
    ifmap_w: object,
    filter_h: object,
    filter_w: object,
    channels: object,
    num_filters: object,
    stride_h: object = 1,
    stride_w: object | None = None,
) -> ConvView:
    """GEMM view of a convolution as SCALE-Sim builds it (inputs are the padded sizes).

    Parameters
    ----------
    ifmap_h, ifmap_w
        Input height and width including any padding (pixels).
    filter_h, filter_w
        Filter height and width (pixels); must not exceed the input.
    channels, num_filters
        Input channels and output channels (filters).
    stride_h, stride_w
        Strides (pixels); ``stride_w`` defaults to ``stride_h``.

    Returns
    -------
    ConvView
        ``m = E_h * E_w`` with ``E = ceil((H - R) / stride) + 1``, ``n = num_filters``,
        ``k = filter_h * filter_w * channels`` and the distinct ifmap words touched.

    Examples
    --------
    >>> v = conv_gemm_view(229, 229, 7, 7, 3, 64, 2)   # ResNet-50 conv1: 111 * 2 + 7 = 229
    >>> int(v.m), int(v.n), int(v.k)
    (12544, 64, 147)
    """
    h = _positive_ints("ifmap_h", ifmap_h)
    w = _positive_ints("ifmap_w", ifmap_w)
    fh = _positive_ints("filter_h", filter_h)
    fw = _positive_ints("filter_w", filter_w)
    c = _positive_ints("channels", channels)
    nf = _positive_ints("num_filters", num_filters)
    sh = _positive_ints("stride_h", stride_h)
    sw = sh if stride_w is None else _positive_ints("stride_w", stride_w)
    if np.any(fh > h):
        raise SystolicError(f"systolic: filter_h exceeds ifmap_h; got {fh} > {h}")
    if np.any(fw > w):
        raise SystolicError(f"systolic: filter_w exceeds ifmap_w; got {fw} > {w}")
    hw_c = _largest(h) * _largest(w) * _largest(c)
    if _is_exact(h, w, fh, fw, c, nf, sh, sw) or 4 * max(hw_c, _largest(h) + _largest(sh),
                                                           _largest(w) + _largest(sw)) >= _INT64_SAFE:
        # flat 1-d object arrays: numpy turns 0-d object results into Python ints it cannot hold again
        shape = np.broadcast_shapes(*(np.shape(x) for x in (h, w, fh, fw, c, nf, sh, sw)))
        h, w, fh, fw, c, nf, sh, sw = (x.ravel() for x in _to_exact(*np.broadcast_arrays(h, w, fh, fw, c, nf, sh, sw)))
        v = _conv_view(h, w, fh, fw, c, nf, sh, sw)
        return ConvView(*(np.asarray(x).reshape(shape) for x in (v.m, v.n, v.k, v.ofmap_h, v.ofmap_w,
                                                                 v.ifmap_words)))
    return _conv_view(h, w, fh, fw, c, nf, sh, sw)


def _conv_view(h: np.ndarray, w: np.ndarray, fh: np.ndarray, fw: np.ndarray, c: np.ndarray, nf: np.ndarray,
               sh: np.ndarray, sw: np.ndarray) -> ConvView:
    eh = _ceil_div(h - fh, sh) + 1
    ew = _ceil_div(w - fw, sw) + 1
    rows_touched = _touched(h, fh, sh, eh)
    cols_touched = _touched(w, fw, sw, ew)
    return ConvView(
        m=eh * ew,
        n=nf,
        k=fh * fw * c,
        ofmap_h=eh,
        ofmap_w=ew,
        ifmap_words=rows_touched * cols_touched * c,
    )


def _touched(size: np.ndarray, window: np.ndarray, stride: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Input pixels along one axis covered by ``count`` windows (the last may overhang the edge)."""
    overlapping = np.minimum(size, (count - 1) * stride + window)
    whole = (size - window) // stride + 1
    edge = np.minimum(np.maximum(size - (count - 1) * stride, 0), window)
    disjoint = whole * window + np.where(count > whole, edge, 0)
    return np.where(stride <= window, overlapping, disjoint)


def _fold_mean_scalesim(
    row_folds: np.ndarray,
    col_folds: np.ndarray,
    values: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    exact_mean: np.ndarray,
) -> np.ndarray:
    """Mean of per-fold values summed one fold at a time, column fold outermost (as SCALE-Sim).

    ``values`` are the per-fold figures for (full row & full col, last row fold, last col fold,
    both last). Adding them in SCALE-Sim's order, in IEEE double precision like its Python loop,
    makes the result bit-identical to its report. Costs one float addition per fold, so layers of
    more than :data:`SCALESIM_FOLD_LOOP_MAX` folds take ``exact_mean`` (the same mean, rounded once).
    """
    shape = np.broadcast_shapes(np.shape(row_folds), np.shape(col_folds), *map(np.shape, values),
                                np.shape(exact_mean))
    rf, cf, full, last_r, last_c, last_rc, mean = (
        np.broadcast_to(x, shape).ravel().tolist() for x in (row_folds, col_folds, *values, exact_mean)
    )
    out = []
    for i in range(len(rf)):
        if rf[i] * cf[i] > SCALESIM_FOLD_LOOP_MAX:
            out.append(float(mean[i]))
            continue
        acc = 0.0
        for fc in range(cf[i]):
            v, v_end = (full[i], last_r[i]) if fc < cf[i] - 1 else (last_c[i], last_rc[i])
            for _ in range(rf[i] - 1):
                acc += v
            acc += v_end
        out.append(acc / (rf[i] * cf[i]))
    return np.asarray(out, dtype=np.float64).reshape(shape)


def gemm_cycles(
    rows: object,
    cols: object,
    dataflow: str,
    m: object,
    n: object,
    k: object,
    *,
    ifmap_words: object | None = None,
    sram_words: tuple[object, object, object] | None = None,
    dram_words_per_cycle: object | None = None,
    fold_average: FoldAverage = "exact",
) -> SystolicResult:
    """Cycles, utilisation, SRAM and DRAM traffic of ``O[M,N] = I[M,K] @ W[K,N]`` on an array.

    Every numeric argument broadcasts (numpy rules), so one call evaluates many layers, array
    geometries or memory configurations.

    Parameters
    ----------
    rows, cols
        PE rows and columns of the array (counts).
    dataflow
        ``"os"``, ``"ws"`` or ``"is"``.
    m, n, k
        GEMM dimensions (counts); for a convolution use :func:`conv_gemm_view`.
    ifmap_words
        Distinct ifmap words (words) for DRAM traffic; default ``m * k`` (a plain GEMM).
    sram_words
        ``(ifmap, filter, ofmap)`` scratchpad capacities (words). ``None``: unbounded, every
        operand is read from and written to DRAM exactly once.
    dram_words_per_cycle
        DRAM bandwidth shared by the three operands (words per cycle). ``None`` or ``inf``: ideal
        memory (no stall, prefetch or drain cycles).
    fold_average
        ``"exact"``: mapping efficiency and compute utilisation as exact ratios rounded once.
        ``"scalesim"``: per-fold values summed one by one in SCALE-Sim's order, bit-identical to
        its report (costs a loop over folds).

    Returns
    -------
    SystolicResult

    Examples
    --------
    >>> r = gemm_cycles(8, 8, "os", 20, 13, 30)
    >>> int(r.folds), int(r.fold_cycles), int(r.compute_cycles)
    (6, 44, 263)
    >>> int(r.sram_ifmap_reads), int(r.sram_filter_reads), int(r.sram_ofmap_writes)
    (1200, 1170, 356)
    """
    df = _check_dataflow(dataflow)
    if fold_average not in ("exact", "scalesim"):
        raise SystolicError(
            f"systolic: fold_average; got {fold_average!r}; expected 'exact' or 'scalesim'"
        )
    R, C, M, N, K, ifw, caps, bw = _validated_operands(rows, cols, m, n, k, ifmap_words, sram_words,
                                                       dram_words_per_cycle)
    exact = _needs_exact(R, C, M, N, K, ifw, bw)
    shape = M.shape
    if exact:
        shape, R, C, M, N, K, bw, ifw, caps = _flatten_exact(R, C, M, N, K, bw, ifw, caps)
    if ifw is None:
        ifw = M * K

    result = _gemm_result(df, fold_average, exact, R, C, M, N, K, ifw, caps, bw)
    if not exact:
        return result
    return dataclasses.replace(result, **{  # the flat exact arrays back in the broadcast shape
        f.name: np.asarray(getattr(result, f.name)).reshape(shape)
        for f in dataclasses.fields(result) if f.name != "dataflow"
    })


def _validated_operands(rows: object, cols: object, m: object, n: object, k: object, ifmap_words: object | None,
                        sram_words: tuple[object, object, object] | None, dram_words_per_cycle: object | None
                        ) -> tuple[np.ndarray, ...]:
    """gemm_cycles' numeric arguments checked and broadcast: R, C, M, N, K, ifmap words, SRAM caps, bandwidth."""
    R = _positive_ints("rows", rows)
    C = _positive_ints("cols", cols)
    M = _positive_ints("m", m)
    N = _positive_ints("n", n)
    K = _positive_ints("k", k)
    R, C, M, N, K = np.broadcast_arrays(R, C, M, N, K)
    ifw = None if ifmap_words is None else _positive_ints("ifmap_words", ifmap_words)
    caps: tuple[np.ndarray, ...] | None = None
    if sram_words is not None:
        if len(sram_words) != 3:
            raise SystolicError(
                f"systolic: sram_words; got {sram_words!r}; expected (ifmap, filter, ofmap) words"
            )
        caps = tuple(_positive_ints(f"sram_words[{which}]", v)
                     for which, v in zip(("ifmap", "filter", "ofmap"), sram_words, strict=True))
    if dram_words_per_cycle is None:
        bw = np.full(M.shape, np.inf)
    else:
        bw = np.asarray(dram_words_per_cycle, dtype=np.float64)
        if not np.all(bw > 0) or np.any(np.isnan(bw)):
            raise SystolicError(
                f"systolic: dram_words_per_cycle must be > 0; got {dram_words_per_cycle!r}"
            )
    return R, C, M, N, K, ifw, caps, bw


def _needs_exact(R: np.ndarray, C: np.ndarray, M: np.ndarray, N: np.ndarray, K: np.ndarray,
                 ifw: np.ndarray | None, bw: np.ndarray) -> bool:
    """Whether the arithmetic needs Python integers (an input is one, or a product may exceed int64)."""
    # int64 while every product below provably fits (see "Arithmetic range"), else Python integers
    r_, c_ = _largest(R), _largest(C)
    big = max(_largest(M), _largest(N), _largest(K), 1.0)
    bw_min = float(np.min(bw)) if bw.size else math.inf
    span = big * big * (2 * r_ + 2 * c_ + big) + 4 * big**3 / bw_min + 2 * big * big + 4
    return _is_exact(R, C, M, N, K) or (ifw is not None and _is_exact(ifw)) \
        or 4 * max(100 * big**3, r_ * c_ * span) >= _INT64_SAFE


def _flatten_exact(R: np.ndarray, C: np.ndarray, M: np.ndarray, N: np.ndarray, K: np.ndarray, bw: np.ndarray,
                   ifw: np.ndarray | None, caps: tuple[np.ndarray, ...] | None) -> tuple[Any, ...]:
    """The broadcast shape, then the operands broadcast, flattened and (but bandwidth) as Python integers."""
    # everything broadcast and flattened to 1-d object arrays (numpy turns 0-d object results into
    # Python ints it cannot hold again); results are reshaped back at the end
    extra = [x for x in (ifw, *(caps or ())) if x is not None]
    shape = np.broadcast_shapes(M.shape, bw.shape, *(x.shape for x in extra))
    flat = [x.ravel() for x in np.broadcast_arrays(R, C, M, N, K, bw, *extra)]
    R, C, M, N, K = _to_exact(*flat[:5])
    bw = flat[5].copy()
    rest = _to_exact(*flat[6:])
    if ifw is not None:
        ifw = rest.pop(0)
    if caps is not None:
        caps = tuple(rest)
    return shape, R, C, M, N, K, bw, ifw, caps


def _gemm_result(df: str, fold_average: FoldAverage, exact: bool, R: np.ndarray, C: np.ndarray, M: np.ndarray,
                 N: np.ndarray, K: np.ndarray, ifw: np.ndarray, caps: tuple[np.ndarray, ...] | None,
                 bw: np.ndarray) -> SystolicResult:
    """The fold geometry, utilisation, SRAM and DRAM traffic and cycles of checked operands (flat when exact)."""
    sr, sc, t = gemm_view(df, M, N, K)
    rf = _ceil_div(sr, R)
    cf = _ceil_div(sc, C)
    folds = rf * cf
    preload = R if df != "os" else np.zeros_like(R)
    fold_cycles = preload + t + R + C - 2
    compute_cycles = folds * fold_cycles - 1
    macs = M * N * K
    pes = R * C

    # Per-fold occupancy: full folds, the last row fold, the last column fold.
    r_last = sr - (rf - 1) * R
    c_last = sc - (cf - 1) * C
    mapping_eff, compute_util = _fold_utilisation(df, fold_average, exact, R, C, sr, sc, t, rf, cf, r_last, c_last)
    sram_if, sram_f, sram_of_w, sram_of_r = _sram_accesses(df, M, N, K, R, C, rf, cf, folds)
    dram_if, dram_f, dram_of_w, dram_of_r, first_in, last_out = _dram_traffic(
        df, exact, caps, ifw, M, N, K, R, C, rf, cf, r_last, c_last)
    dram_words = dram_if + dram_f + dram_of_w + dram_of_r

    prefetch, drain, stall, memory_cycles, total = _memory_timing(dram_words, first_in, last_out,
                                                                  compute_cycles, bw, exact)
    # a 1-cycle floor: a 1 x 1 x 1 GEMM on a 1 x 1 os array has total_cycles 0 (SCALE-Sim's last-cycle index)
    overall = np.asarray((macs * 100) / (np.maximum(total, 1) * pes), dtype=np.float64)
    bound = np.where(memory_cycles > compute_cycles, "memory", "compute")

    return SystolicResult(
        dataflow=df,
        rows=R,
        cols=C,
        m=M,
        n=N,
        k=K,
        sr=sr,
        sc=sc,
        t=t,
        row_folds=rf,
        col_folds=cf,
        folds=folds,
        fold_cycles=fold_cycles,
        preload_cycles=folds * preload,
        skew_cycles=folds * (R + C - 2),
        stream_cycles=folds * t,
        compute_cycles=compute_cycles,
        macs=macs,
        overall_util_pct=overall,
        mapping_eff_pct=np.asarray(mapping_eff, dtype=np.float64),
        compute_util_pct=np.asarray(compute_util, dtype=np.float64),
        sram_ifmap_reads=sram_if,
        sram_filter_reads=sram_f,
        sram_ofmap_writes=sram_of_w,
        sram_ofmap_reads=sram_of_r,
        dram_ifmap_reads=dram_if,
        dram_filter_reads=dram_f,
        dram_ofmap_writes=dram_of_w,
        dram_ofmap_reads=dram_of_r,
        prefetch_cycles=prefetch,
        drain_cycles=drain,
        stall_cycles=stall,
        memory_cycles=memory_cycles,
        total_cycles=total,
        bound=bound,
    )


def _fold_utilisation(df: str, fold_average: FoldAverage, exact: bool, R: np.ndarray, C: np.ndarray,
                      sr: np.ndarray, sc: np.ndarray, t: np.ndarray, rf: np.ndarray, cf: np.ndarray,
                      r_last: np.ndarray, c_last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mapping efficiency and compute utilisation (percent), as exact ratios or SCALE-Sim's per-fold mean."""
    folds = rf * cf
    pes = R * C
    util_len = t + R + C - 2 if df == "os" else 2 * R + 2 * C + t - 3
    if exact:  # integer numerators and denominators, one rounding (a float of 100.0 * x could overflow)
        mapping_mean = np.asarray((sr * sc) / (pes * folds), dtype=np.float64)
        compute_mean = np.asarray((sr * sc * t) / (pes * util_len * folds), dtype=np.float64)
    else:
        mapping_mean = (sr * sc) / (pes * folds)
        compute_mean = (sr * sc * t) / (pes * util_len * folds)
    if fold_average == "exact":
        if exact:
            mapping_eff = np.asarray((100 * sr * sc) / (pes * folds), dtype=np.float64)
            compute_util = np.asarray((100 * sr * sc * t) / (pes * util_len * folds), dtype=np.float64)
        else:
            mapping_eff = 100.0 * (sr * sc) / (pes * folds)
            compute_util = 100.0 * (sr * sc * t) / (pes * util_len * folds)
    else:
        used = (R * C, r_last * C, R * c_last, r_last * c_last)
        mapping_eff = _fold_mean_scalesim(rf, cf, tuple(u / pes for u in used), mapping_mean) * 100
        compute_util = (
            _fold_mean_scalesim(rf, cf, tuple((u * t) / (pes * util_len) for u in used), compute_mean) * 100
        )
    return mapping_eff, compute_util


def _sram_accesses(df: str, M: np.ndarray, N: np.ndarray, K: np.ndarray, R: np.ndarray, C: np.ndarray,
                   rf: np.ndarray, cf: np.ndarray, folds: np.ndarray) -> tuple[np.ndarray, ...]:
    """SCALE-Sim's SRAM access counts: ifmap reads, filter reads, ofmap writes, ofmap reads."""
    if df == "os":
        sram_if = M * K * cf
        sram_f = K * N * rf
        sram_of_w = M * N + folds * (R + C)
        sram_of_r = np.zeros_like(M)
    elif df == "ws":
        sram_if = M * K * cf
        sram_f = K * N
        sram_of_w = M * N * rf
        sram_of_r = M * N * (rf - 1)
    else:
        sram_if = M * K
        sram_f = K * N * cf
        sram_of_w = M * N * rf
        sram_of_r = M * N * (rf - 1)
    return sram_if, sram_f, sram_of_w, sram_of_r


def _dram_traffic(df: str, exact: bool, caps: tuple[np.ndarray, ...] | None, ifw: np.ndarray, M: np.ndarray,
                  N: np.ndarray, K: np.ndarray, R: np.ndarray, C: np.ndarray, rf: np.ndarray, cf: np.ndarray,
                  r_last: np.ndarray, c_last: np.ndarray) -> tuple[np.ndarray, ...]:
    """DRAM words of the double-buffered scratchpads per operand, then the first input and last output tiles."""
    if caps is None:
        cap_if = cap_f = cap_of = (np.full(M.shape, math.inf, dtype=object) if exact
                                   else np.full_like(M, np.iinfo(np.int64).max))
    else:
        cap_if, cap_f, cap_of = caps
    fw = K * N
    ow = M * N
    ifw = np.minimum(ifw, M * K)
    ones = np.ones_like(M)
    if df == "os":
        dram_if = ifw * np.where(ifw <= cap_if, ones, cf)
        dram_f = fw * np.where(K * np.minimum(C, N) <= cap_f, ones, rf)
        dram_of_w = ow
        dram_of_r = np.zeros_like(M)
        first_in = np.zeros_like(M)
        last_out = r_last * c_last
    else:
        if df == "ws":
            dram_if = ifw * np.where(ifw <= cap_if, ones, cf)
            dram_f = fw
            block = M * np.minimum(C, N)
            first_in = np.minimum(R, K) * np.minimum(C, N)
        else:
            dram_if = ifw
            dram_f = fw * np.where(fw <= cap_f, ones, cf)
            block = np.minimum(C, M) * N
            first_in = np.minimum(np.minimum(R, K) * np.minimum(C, M), ifw)
        last_out = np.zeros_like(M)
        spill = block > cap_of
        dram_of_w = np.where(spill, ow * rf, ow)
        dram_of_r = np.where(spill, ow * (rf - 1), 0)
    return dram_if, dram_f, dram_of_w, dram_of_r, first_in, last_out


def _memory_timing(dram_words: np.ndarray, first_in: np.ndarray, last_out: np.ndarray, compute_cycles: np.ndarray,
                   bw: np.ndarray, exact: bool) -> tuple[np.ndarray, ...]:
    """Prefetch, drain, stall, memory-bound and total cycles at ``bw`` words per cycle."""
    prefetch = _ceil_by_rate(first_in, bw, exact)
    drain = _ceil_by_rate(last_out, bw, exact)
    overlapped = _ceil_by_rate(dram_words - first_in - last_out, bw, exact)
    stall = np.maximum(overlapped - compute_cycles, 0)
    memory_cycles = _ceil_by_rate(dram_words, bw, exact)
    total = compute_cycles + stall + prefetch + drain
    return prefetch, drain, stall, memory_cycles, total


def conv_cycles(
    rows: object,
    cols: object,
    dataflow: str,
    ifmap_h: object,
    ifmap_w: object,
    filter_h: object,
    filter_w: object,
    channels: object,
    num_filters: object,
    stride_h: object = 1,
    stride_w: object | None = None,
    **kwargs: object,
) -> SystolicResult:
    """:func:`gemm_cycles` of a convolution through its SCALE-Sim GEMM view.

    Parameters are those of :func:`conv_gemm_view` (padded input sizes) and the keyword options
    of :func:`gemm_cycles` (``sram_words``, ``dram_words_per_cycle``, ``fold_average``).
    """
    v = conv_gemm_view(ifmap_h, ifmap_w, filter_h, filter_w, channels, num_filters, stride_h, stride_w)
    return gemm_cycles(rows, cols, dataflow, v.m, v.n, v.k, ifmap_words=v.ifmap_words, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Energy (see "Energy" in the module docstring)

#: The sourced default coefficients (45 nm).
DEFAULT_ENERGY_FILE = Path(__file__).parent / "catalog" / "defaults" / "systolic_energy.toml"
#: Operand words passed from a PE to its neighbour per MAC. In every dataflow two of the three operands
#: travel through the array while the third stays: os moves ifmap (right) and filter (down), ws moves
#: ifmap (right) and the partial sum (down), is moves filter (right) and the partial sum (down).
HOPS_PER_MAC = 2
#: Operand dtype of a word of 1, 2 or 4 bytes (a 2-byte word is costed as bf16, which this model
#: prices like fp16).
_DTYPE_OF_WORD: dict[int, str] = {1: "int8", 2: "bf16", 4: "fp32"}

# Field tables of the energy file: dotted path (with <dtype> for any MAC dtype) -> SI unit.
_ENERGY_FIELDS: dict[str, str] = {
    "mac.<dtype>.multiply_j": "J/FLOP",
    "mac.<dtype>.accumulate_j": "J/FLOP",
    "register.j_per_byte": "J/B",
    "dram.j_per_byte": "J/B",
    "static.pe_w": "W",
    "static.other_w": "W",
    "clock.hz": "Hz",
}
_ENERGY_TOP = ("schema", "technology_node", "refs", "mac", "register", "sram", "dram", "static", "clock")
_FIELD_KEYS = ("value", "source", "note")
_POINT_KEYS = ("capacity", "j_per_byte", "source", "note")


class SystolicEnergyError(SystolicError):
    """Invalid energy coefficients (file, overlay or override) or energy inputs; the message locates it."""


@dataclass(frozen=True, eq=False)
class SystolicEnergyParams:
    """Energy coefficients of a systolic-array run, in SI units, with the source of every number.

    Attributes
    ----------
    technology_node
        Process the coefficients describe (``"45 nm"`` for the defaults).
    mac_multiply_j, mac_accumulate_j
        Energy of one multiply and one accumulate per dtype (J per operation).
    register_j_per_byte
        One byte moved from a PE into its neighbour's pipeline register (J/B).
    sram_capacity_bytes, sram_j_per_byte
        Scratchpad access energy (J/B, reads and writes alike) at increasing capacities (bytes);
        :func:`sram_j_per_byte` interpolates them on log-log axes.
    dram_j_per_byte
        One byte read from or written to DRAM (J/B).
    pe_static_w, other_static_w
        Leakage of one PE, and any other static power of the array (W).
    clock_hz
        Clock used to turn cycles into the time static power accrues over, when the caller gives none.
    sources
        Dotted path -> source text of every number (``sram.points[0].j_per_byte``...).
    source_files
        The files (and ``--energy-set`` overrides) the numbers came from, defaults first.
    """

    technology_node: str
    mac_multiply_j: Mapping[str, float]
    mac_accumulate_j: Mapping[str, float]
    register_j_per_byte: float
    sram_capacity_bytes: tuple[float, ...]
    sram_j_per_byte: tuple[float, ...]
    dram_j_per_byte: float
    pe_static_w: float
    other_static_w: float
    clock_hz: float
    sources: Mapping[str, str]
    source_files: tuple[str, ...]

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes with a MAC energy, sorted."""
        return tuple(sorted(self.mac_multiply_j))

    def mac_j(self, dtype: str) -> float:
        """Energy of one multiply-accumulate in ``dtype`` (J); unknown dtypes raise with a suggestion."""
        if dtype not in self.mac_multiply_j:
            from nodeperf.suggest import did_you_mean

            raise SystolicEnergyError(
                f"systolic energy: dtype; got {dtype!r}; expected one of {', '.join(self.dtypes)} (the dtypes "
                f"with a [mac.<dtype>] energy){did_you_mean(str(dtype), self.dtypes)}")
        return self.mac_multiply_j[dtype] + self.mac_accumulate_j[dtype]


@dataclass(frozen=True)
class SystolicEnergy:
    """Energy of a systolic run split by where it is spent (J; every field broadcasts like the result).

    Attributes
    ----------
    dtype
        Operand dtype of the MACs.
    mac_j
        ``macs x (multiply + accumulate)``.
    register_j
        ``HOPS_PER_MAC x macs x word_bytes x register_j_per_byte`` (operands passed PE to PE).
    sram_ifmap_j, sram_filter_j, sram_ofmap_j
        Scratchpad traffic times its per-byte energy at that scratchpad's capacity: the array's reads
        (SCALE-Sim's counts) plus the DRAM fills of ifmap and filter; the ofmap scratchpad's writes and
        partial-sum reads plus the words it hands to or takes back from DRAM.
    sram_j
        Their sum.
    dram_j
        All DRAM words x ``word_bytes`` x ``dram_j_per_byte``.
    static_j
        ``(pe_static_w x rows x cols + other_static_w) x total_cycles / clock_hz``.
    sram_j_per_byte
        ``(ifmap, filter, ofmap)`` energy per byte of the three scratchpads (J/B).
    clock_hz
        Clock the static energy was accrued at (Hz).
    """

    dtype: str
    mac_j: np.ndarray
    register_j: np.ndarray
    sram_ifmap_j: np.ndarray
    sram_filter_j: np.ndarray
    sram_ofmap_j: np.ndarray
    dram_j: np.ndarray
    static_j: np.ndarray
    sram_j_per_byte: tuple[np.ndarray, np.ndarray, np.ndarray]
    clock_hz: np.ndarray

    @property
    def sram_j(self) -> np.ndarray:
        return self.sram_ifmap_j + self.sram_filter_j + self.sram_ofmap_j

    @property
    def energy_j(self) -> np.ndarray:
        """Total energy (J): MAC + register + SRAM + DRAM + static."""
        return self.mac_j + self.register_j + self.sram_j + self.dram_j + self.static_j

    def breakdown(self) -> dict[str, np.ndarray]:
        """``{"mac", "register", "sram", "dram", "static"}`` -> J; the parts sum to :attr:`energy_j`."""
        return {"mac": self.mac_j, "register": self.register_j, "sram": self.sram_j, "dram": self.dram_j,
                "static": self.static_j}


class _EnergyProblems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, path: str, msg: str) -> None:
        self.items.append(f"{where}: {path}: {msg}" if path else f"{where}: {msg}")

    def raise_if_any(self, where: str) -> None:
        if self.items:
            from nodeperf.suggest import format_problems

            raise SystolicEnergyError(format_problems(where, self.items, "systolic energy coefficients"))


def _read_energy_toml(path: Path) -> dict[str, Any]:
    from nodeperf.files import MAX_NESTING, read_text_file, toml_nesting_depth

    if not path.exists() and not path.is_symlink():
        raise SystolicEnergyError(f"{path}: no such file; expected a TOML file of systolic energy coefficients "
                                  f"(see {DEFAULT_ENERGY_FILE.name})") from None
    text = read_text_file(path, what="a TOML file of systolic energy coefficients", error=SystolicEnergyError,
                          max_bytes=16 << 20)
    if toml_nesting_depth(text) > MAX_NESTING:
        raise SystolicEnergyError(f"{path}: TOML nested too deeply; got {toml_nesting_depth(text)} levels; expected "
                                  f"at most {MAX_NESTING}")
    if not text.strip():
        raise SystolicEnergyError(f"{path}: empty file; got {len(text)} bytes of blank text; expected tables as in "
                                  f"{DEFAULT_ENERGY_FILE.name}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SystolicEnergyError(f"{path}: not valid TOML; got {exc}; expected tables as in "
                                  f"{DEFAULT_ENERGY_FILE.name}") from None


def _unit_of(path: str) -> str | None:
    parts = path.split(".")
    if len(parts) == 3 and parts[0] == "mac":
        return _ENERGY_FIELDS.get(f"mac.<dtype>.{parts[2]}")
    return _ENERGY_FIELDS.get(path)


def _field_paths(doc: Mapping[str, Any], where: str, problems: _EnergyProblems) -> dict[str, Any]:
    """Flatten a document to ``{dotted path: field table}`` (``sram.points`` kept whole), checking names."""
    from hwmodels.tables import table_problems

    out: dict[str, Any] = {}
    unknown = dict(table_problems(doc, allowed=_ENERGY_TOP))
    for key, val in doc.items():
        if key in unknown:  # in file order, among the problems of the known tables
            problems.add(where, key, unknown[key]())
            continue
        if key in ("schema", "technology_node", "refs"):
            out[key] = val
            continue
        if not isinstance(val, Mapping):
            problems.add(where, key, f"not a table; got {val!r}; expected [{key}]")
            continue
        if key == "sram":
            for at, msg in table_problems(val, allowed=("points",), path="sram", expected="points"):
                problems.add(where, at, msg())
            if "points" in val:
                out["sram.points"] = val["points"]
            continue
        if key == "mac":
            for dt, table in val.items():
                if not isinstance(table, Mapping):
                    problems.add(where, f"mac.{dt}", f"not a table; got {table!r}; expected [mac.{dt}] with "
                                                     "multiply_j and accumulate_j")
                    continue
                for at, msg in table_problems(table, allowed=("multiply_j", "accumulate_j"), path=f"mac.{dt}",
                                              what="field", expected="multiply_j or accumulate_j"):
                    problems.add(where, at, msg())
                out.update({f"mac.{dt}.{n}": f for n, f in table.items() if n in ("multiply_j", "accumulate_j")})
            continue
        names = sorted(p.split(".")[1] for p in _ENERGY_FIELDS if p.startswith(key + "."))
        for at, msg in table_problems(val, allowed=names, path=key, what="field"):
            problems.add(where, at, msg())
        out.update({f"{key}.{name}": field for name, field in val.items() if name in names})
    return out


def _parse_field(path: str, field: Any, where: str, problems: _EnergyProblems) -> tuple[float, str] | None:
    from hwmodels.units import UnitError, parse_quantity

    if not isinstance(field, Mapping):
        problems.add(where, path, f"not a sourced value; got {field!r}; expected {{ value = \"...\", "
                                  "source = \"...\" }")
        return None
    extra = sorted(set(field) - set(_FIELD_KEYS))
    if extra:
        problems.add(where, path, f"unknown key; got {extra[0]!r}; expected value, source, note")
    if not isinstance(field.get("source"), str) or not field.get("source", "").strip():
        problems.add(where, path, f"no source; got {field.get('source')!r}; expected source = \"<datasheet, "
                                  "paper and table, or 'design point: ...'>\"")
    if "value" not in field:
        problems.add(where, path, "no value; got none; expected value = \"<number> <unit>\"")
        return None
    unit = _unit_of(path) or "1"
    try:
        v = parse_quantity(field["value"], unit)
    except UnitError as exc:
        problems.add(where, path, str(exc))
        return None
    if unit == "Hz" and not v > 0:
        problems.add(where, path, f"not a positive clock; got {field['value']!r}; expected a frequency > 0")
        return None
    if v < 0:
        problems.add(where, path, f"negative {'power' if unit == 'W' else 'energy'}; got {field['value']!r}; "
                                  "expected a value >= 0")
        return None
    return v, str(field.get("source", ""))


def _parse_points(points: Any, where: str, problems: _EnergyProblems
                  ) -> tuple[tuple[float, ...], tuple[float, ...], dict[str, str]] | None:
    from hwmodels.units import UnitError, parse_quantity

    if not isinstance(points, list) or not points or not all(isinstance(p, Mapping) for p in points):
        problems.add(where, "sram.points", f"not a list of points; got {points!r}; expected [{{ capacity = "
                                           "\"8 KiB\", j_per_byte = \"1.25 pJ/B\", source = \"...\" }, ...]")
        return None
    caps: list[float] = []
    energies: list[float] = []
    sources: dict[str, str] = {}
    ok = True
    for i, p in enumerate(points):
        at = f"sram.points[{i}]"
        extra = sorted(set(p) - set(_POINT_KEYS))
        if extra:
            problems.add(where, at, f"unknown key; got {extra[0]!r}; expected {', '.join(_POINT_KEYS)}")
        if not isinstance(p.get("source"), str) or not p.get("source", "").strip():
            problems.add(where, at, f"no source; got {p.get('source')!r}; expected source = \"...\"")
        try:
            c = parse_quantity(p.get("capacity"), "B")
            e = parse_quantity(p.get("j_per_byte"), "J/B")
        except UnitError as exc:
            problems.add(where, at, str(exc))
            ok = False
            continue
        if not c > 0 or not e > 0:
            problems.add(where, at, f"not positive; got capacity {p.get('capacity')!r}, j_per_byte "
                                    f"{p.get('j_per_byte')!r}; expected a size > 0 and an energy > 0")
            ok = False
            continue
        caps.append(c)
        energies.append(e)
        sources[f"{at}.j_per_byte"] = str(p.get("source", ""))
    if ok and any(b <= a for a, b in zip(caps, caps[1:], strict=False)):
        problems.add(where, "sram.points", f"capacities not increasing; got {caps}; expected one point per size, "
                                           "smallest first")
        ok = False
    if ok and any(b < a for a, b in zip(energies, energies[1:], strict=False)):
        problems.add(where, "sram.points", f"energy falls with capacity; got {energies} J/B; expected a larger "
                                           "scratchpad to cost at least as much per byte")
        ok = False
    return (tuple(caps), tuple(energies), sources) if ok else None


def _merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in overlay.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def load_systolic_energy(overlay: str | Path | None = None, overrides: Mapping[str, object] | None = None, *,
                         path: str | Path = DEFAULT_ENERGY_FILE) -> SystolicEnergyParams:
    """Energy coefficients: the defaults file, then an overlay file, then single-field overrides.

    Parameters
    ----------
    overlay
        A TOML file with any subset of the defaults' tables (a field replaces the default field; a
        new ``[mac.<dtype>]`` table adds a dtype; ``sram.points`` replaces the whole list).
    overrides
        Dotted path -> value, e.g. ``{"dram.j_per_byte": "20 pJ/B", "static.other_w": "2 W"}``; each is
        recorded with the source ``"override"``.
    path
        The defaults file.

    Raises
    ------
    SystolicEnergyError
        Every problem at once, located by file and dotted path: unknown names (with a suggestion),
        missing sources, wrong units, negative energies or powers, a non-positive clock, SRAM points
        out of order or cheaper at larger sizes.

    Examples
    --------
    >>> p = load_systolic_energy()
    >>> p.technology_node, round(p.mac_j("int8") * 1e12, 3)
    ('45 nm', 0.3)
    >>> round(load_systolic_energy(overrides={"dram.j_per_byte": "20 pJ/B"}).dram_j_per_byte * 1e12, 3)
    20.0
    """
    ov = tuple((str(k), v if isinstance(v, str | int | float) else repr(v)) for k, v in (overrides or {}).items())
    return _load_energy_cached(str(path), None if overlay is None else str(overlay), ov)


@functools.lru_cache(maxsize=16)
def _load_energy_cached(path: str, overlay: str | None,
                        overrides: tuple[tuple[str, object], ...]) -> SystolicEnergyParams:
    problems = _EnergyProblems()
    base_path = Path(path)
    flat = _field_paths(_read_energy_toml(base_path), str(base_path), problems)
    origin = {k: str(base_path) for k in flat}
    files = [str(base_path)]
    if overlay is not None:
        ov_flat = _field_paths(_read_energy_toml(Path(overlay)), overlay, problems)
        for k, v in ov_flat.items():
            if k in ("refs",) and isinstance(flat.get(k), Mapping):
                v = _merge(dict(flat[k]), v)
            flat[k] = v
            origin[k] = overlay
        files.append(overlay)
    for key, value in overrides:
        where = "--energy-set"
        known = [p for p in flat if p not in ("schema", "technology_node", "refs", "sram.points")]
        if key == "technology_node":
            flat[key] = str(value)
        elif key.startswith("sram.points"):
            problems.add(where, key, "the SRAM points are a list; got a single-field override; expected them in "
                                     "an overlay file ([sram] points = [...])")
        elif _unit_of(key) is None:
            from nodeperf.suggest import did_you_mean

            problems.add(where, key, f"unknown field; got {key!r}; expected one of {', '.join(sorted(known))}"
                                     f"{did_you_mean(key, known)}")
        else:
            flat[key] = {"value": value, "source": "override (--energy-set)"}
            origin[key] = where
        if where not in files:
            files.append(where)
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key in sorted(flat):
        if key in ("schema", "technology_node", "refs", "sram.points"):
            continue
        got = _parse_field(key, flat[key], origin[key], problems)
        if got is not None:
            values[key], sources[key] = got
    pts = _parse_points(flat.get("sram.points"), origin.get("sram.points", str(base_path)), problems)
    if pts is not None:
        sources.update(pts[2])
    required = ["register.j_per_byte", "dram.j_per_byte", "static.pe_w", "static.other_w", "clock.hz"]
    for key in required:
        if key not in flat:
            problems.add(str(base_path), key, "missing; got no value; expected it in the defaults file")
    dtypes = sorted({k.split(".")[1] for k in flat if k.startswith("mac.")})
    for dt in dtypes:
        for part in ("multiply_j", "accumulate_j"):
            if f"mac.{dt}.{part}" not in flat:
                problems.add(origin.get(f"mac.{dt}.multiply_j", origin.get(f"mac.{dt}.accumulate_j", path)),
                             f"mac.{dt}.{part}", "missing; got only the other half of the MAC; expected both "
                                                 "multiply_j and accumulate_j")
    if not dtypes:
        problems.add(str(base_path), "mac", "no MAC energies; got none; expected [mac.<dtype>] tables")
    node = flat.get("technology_node")
    if not isinstance(node, str) or not node.strip():
        problems.add(str(base_path), "technology_node", f"missing; got {node!r}; expected the process, e.g. "
                                                        "\"45 nm\"")
    problems.raise_if_any(overlay or path)
    assert pts is not None
    return SystolicEnergyParams(
        technology_node=str(node),
        mac_multiply_j={dt: values[f"mac.{dt}.multiply_j"] for dt in dtypes},
        mac_accumulate_j={dt: values[f"mac.{dt}.accumulate_j"] for dt in dtypes},
        register_j_per_byte=values["register.j_per_byte"],
        sram_capacity_bytes=pts[0],
        sram_j_per_byte=pts[1],
        dram_j_per_byte=values["dram.j_per_byte"],
        pe_static_w=values["static.pe_w"],
        other_static_w=values["static.other_w"],
        clock_hz=values["clock.hz"],
        sources=sources,
        source_files=tuple(files),
    )


def sram_j_per_byte(capacity_bytes: object, params: SystolicEnergyParams | None = None) -> np.ndarray:
    """Access energy per byte of a scratchpad of ``capacity_bytes`` (J/B), broadcasting.

    A power law between neighbouring points of ``params.sram_*`` (straight lines on log-log axes),
    extended beyond the smallest and largest points with the end segments' exponents, so the energy
    never falls as the capacity grows.

    Examples
    --------
    >>> [round(float(x) * 1e12, 3) for x in sram_j_per_byte([8192, 16384, 32768])]
    [1.25, 1.768, 2.5]
    """
    p = load_systolic_energy() if params is None else params
    cap = np.asarray(capacity_bytes, dtype=np.float64)
    if not np.all(np.isfinite(cap)) or not np.all(cap > 0):
        raise SystolicEnergyError(f"systolic energy: scratchpad capacity; got {capacity_bytes!r}; expected sizes "
                                  "> 0 bytes")
    xs = np.log(np.asarray(p.sram_capacity_bytes))
    ys = np.log(np.asarray(p.sram_j_per_byte))
    if xs.size == 1:
        return np.full(cap.shape, float(np.exp(ys[0])))
    slopes = np.diff(ys) / np.diff(xs)
    lx = np.log(cap)
    i = np.clip(np.searchsorted(xs, lx, side="right") - 1, 0, xs.size - 2)
    return np.exp(ys[i] + slopes[i] * (lx - xs[i]))


def operand_words(m: object, n: object, k: object, ifmap_words: object | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Words of each whole operand, ``(ifmap, filter, ofmap) = (ifmap_words or m*k, k*n, m*n)``.

    Scratchpads of (at least) the largest of these over a network's layers hold every operand whole,
    which is what the model's unbounded scratchpads (``sram_words=None``) assume: callers size the
    scratchpads priced by :func:`systolic_energy` with them when no capacity is given.
    """
    M, N, K = (_positive_ints(x, v) for x, v in (("m", m), ("n", n), ("k", k)))
    arrays = [M, N, K] + ([] if ifmap_words is None else [_positive_ints("ifmap_words", ifmap_words)])
    # products beyond int64 would wrap: use exact Python ints then (as the cycle model does)
    if max(_largest(x) for x in (M, N, K)) ** 2 >= 2**62:
        arrays = _to_exact(*arrays)
    M, N, K = arrays[:3]
    ifw = M * K if ifmap_words is None else np.minimum(arrays[3], M * K)
    return ifw, K * N, M * N


def dtype_for_word_bytes(word_bytes: int) -> str:
    """The operand dtype of a ``word_bytes``-byte word: 1 -> int8, 2 -> bf16, 4 -> fp32."""
    if word_bytes not in _DTYPE_OF_WORD:
        raise SystolicEnergyError(f"systolic energy: no dtype for a {word_bytes}-byte word; got word_bytes "
                                  f"{word_bytes!r}; expected 1 (int8), 2 (bf16) or 4 (fp32), or a dtype given "
                                  "explicitly")
    return _DTYPE_OF_WORD[word_bytes]


def _as_float(x: object) -> np.ndarray:
    return np.asarray(x, dtype=np.float64) if np.asarray(x).dtype != object else \
        np.asarray(np.asarray(x).astype(float), dtype=np.float64)


def systolic_energy(
    result: SystolicResult,
    *,
    dtype: str,
    sram_bytes: tuple[object, object, object],
    word_bytes: object = 1,
    clock_hz: object | None = None,
    params: SystolicEnergyParams | None = None,
) -> SystolicEnergy:
    """Energy of the run ``result`` (from :func:`gemm_cycles`) split into MAC, register, SRAM, DRAM and static.

    Parameters
    ----------
    result
        Cycles and traffic of the run (any broadcast shape).
    dtype
        Operand dtype of the MACs (a ``[mac.<dtype>]`` of ``params``: int8, bf16, fp16, fp32 by default).
    sram_bytes
        ``(ifmap, filter, ofmap)`` scratchpad capacities (bytes; broadcast against ``result``): they set
        the energy per byte of each scratchpad. With unbounded scratchpads pass the largest
        :func:`operand_words` of the network times ``word_bytes``.
    word_bytes
        Bytes per word of the traffic counts (as in the cycle model).
    clock_hz
        Array clock (Hz, broadcasts); ``None``: ``params.clock_hz``.
    params
        Coefficients (:func:`load_systolic_energy`); ``None``: the sourced defaults.

    Returns
    -------
    SystolicEnergy
        Energies (J) in the broadcast shape of ``result`` and the inputs; they sum to ``energy_j``.

    Examples
    --------
    >>> r = gemm_cycles(8, 8, "ws", 16, 8, 8, sram_words=(1024, 1024, 1024))
    >>> e = systolic_energy(r, dtype="int8", sram_bytes=(1024, 1024, 1024))
    >>> round(float(e.mac_j) * 1e12, 6), int(r.macs)   # 1024 MACs x 0.3 pJ
    (307.2, 1024)
    """
    p = load_systolic_energy() if params is None else params
    mac = p.mac_j(dtype)
    wb = _positive_ints("word_bytes", word_bytes).astype(np.float64)
    if not isinstance(sram_bytes, tuple | list) or len(sram_bytes) != 3:
        raise SystolicEnergyError(f"systolic energy: sram_bytes; got {sram_bytes!r}; expected (ifmap, filter, "
                                  "ofmap) capacities in bytes")
    per_byte = tuple(sram_j_per_byte(c, p) for c in sram_bytes)
    if clock_hz is None:
        clock = np.asarray(p.clock_hz)
    else:
        clock = np.asarray(clock_hz, dtype=np.float64)
        if not np.all(np.isfinite(clock)) or not np.all(clock > 0):
            raise SystolicEnergyError(f"systolic energy: clock_hz; got {clock_hz!r}; expected a frequency > 0 Hz")
    macs = _as_float(result.macs)
    f = _as_float
    sram_if = (f(result.sram_ifmap_reads) + f(result.dram_ifmap_reads)) * wb * per_byte[0]
    sram_f = (f(result.sram_filter_reads) + f(result.dram_filter_reads)) * wb * per_byte[1]
    sram_of = (f(result.sram_ofmap_writes) + f(result.sram_ofmap_reads) + f(result.dram_ofmap_writes)
               + f(result.dram_ofmap_reads)) * wb * per_byte[2]
    dram_words = f(result.dram_ifmap_reads) + f(result.dram_filter_reads) + f(result.dram_ofmap_writes) \
        + f(result.dram_ofmap_reads)
    static_w = p.pe_static_w * f(result.rows) * f(result.cols) + p.other_static_w
    shape = np.broadcast_shapes(macs.shape, sram_if.shape, sram_f.shape, sram_of.shape, clock.shape, wb.shape)

    def full(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, dtype=np.float64), shape).copy()

    return SystolicEnergy(
        dtype=dtype,
        mac_j=full(macs * mac),
        register_j=full(HOPS_PER_MAC * macs * wb * p.register_j_per_byte),
        sram_ifmap_j=full(sram_if),
        sram_filter_j=full(sram_f),
        sram_ofmap_j=full(sram_of),
        dram_j=full(dram_words * wb * p.dram_j_per_byte),
        static_j=full(static_w * f(result.total_cycles) / clock),
        sram_j_per_byte=(full(per_byte[0]), full(per_byte[1]), full(per_byte[2])),
        clock_hz=full(clock),
    )

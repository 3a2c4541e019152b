"""A whole network on many systolic-array designs: one broadcast call of the closed form per layer.

:func:`systolic_network_variants` evaluates the layers of a SCALE-Sim topology (or the convolutions
and matrix products of an operator graph) on ``V`` array designs given as arrays: PE rows and
columns, dataflow, the three scratchpad sizes and the DRAM bandwidth. Variants are grouped by
dataflow (a string that selects the mapping); within a group every layer is one call of
:func:`hwmodels.systolic.gemm_cycles` over the group's arrays, which is the model ``nodeperf
systolic`` runs per design (:func:`simulator.cli.systolic.evaluate_topology`): the same cycles, SRAM
counts and DRAM traffic, with SCALE-Sim v3's compute side exactly.

Scratchpad sizes are bytes, turned into words of ``word_bytes`` as the CLI does
(``floor(bytes / word_bytes)``); the DRAM bandwidth is in words per cycle (``None``: ideal
memory, SCALE-Sim's default); with ``clock_hz`` the cycles are also given as seconds. Energy is
:func:`hwmodels.systolic.systolic_energy` of every layer with the sourced coefficients of
``hwmodels/catalog/defaults/systolic_energy.toml`` (or ``energy``), static power accrued at
``clock_hz`` (or the coefficients' clock), unbounded scratchpads priced at the network's largest
whole operands, as ``nodeperf systolic`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hwmodels.systolic import (
    DATAFLOWS,
    SystolicEnergyParams,
    dtype_for_word_bytes,
    gemm_cycles,
    load_systolic_energy,
    operand_words,
    systolic_energy,
)
from hwmodels.topology import Topology, read_topology
from nodeperf.errors import NodeperfError
from nodeperf.suggest import did_you_mean, short_repr
from workloads.ir import OpGraph
from workloads.semantics import conv_dims, gemm_dims

__all__ = ["SystolicLayers", "SystolicVariants", "network_layers", "systolic_network_variants"]

#: Graph op kinds that run on the array (their GEMM view); every other op is not counted.
ARRAY_KINDS = frozenset({"conv2d", "conv1d", "matmul"})


class SystolicSweepError(NodeperfError, ValueError):
    """A systolic sweep's arrays or layers are invalid; the message names the argument."""


@dataclass(frozen=True)
class SystolicLayers:
    """A network's array layers in GEMM form (int64 arrays, one entry per layer, network order).

    ``repeat`` is how many times a layer runs back to back on the array (conv groups, matmul batch).
    """

    names: tuple[str, ...]
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    ifmap_words: np.ndarray
    repeat: np.ndarray
    skipped_ops: int = 0


@dataclass(frozen=True)
class SystolicVariants:
    """Whole-network figures per design (arrays of length ``V``, variant order).

    Attributes
    ----------
    total_cycles, compute_cycles, stall_cycles, prefetch_cycles, drain_cycles
        Sums over layers (int64 cycles).
    macs
        Multiply-accumulates of the network (the same for every design).
    overall_util_pct
        ``100 * macs / (total_cycles * rows * cols)``.
    dram_ifmap_reads, dram_filter_reads, dram_ofmap_writes, dram_ofmap_reads
        DRAM traffic in words, summed over layers; ``dram_bytes`` is their total times ``word_bytes``.
    memory_bound_layers
        Layers whose DRAM time exceeds their compute.
    latency_s
        ``total_cycles / clock_hz`` when a clock was given, else None.
    layer_total_cycles
        ``(layers, V)`` cycles per layer when ``per_layer=True``, else None.
    energy_j
        Energy of the network per design (J), summed over layers.
    energy_breakdown_j
        Its split ``{"mac", "register", "sram", "dram", "static"}`` -> ``V`` arrays (J), summing to ``energy_j``.
    dtype
        Operand dtype the MAC energy was taken for.
    """

    rows: np.ndarray
    cols: np.ndarray
    dataflow: np.ndarray
    total_cycles: np.ndarray
    compute_cycles: np.ndarray
    stall_cycles: np.ndarray
    prefetch_cycles: np.ndarray
    drain_cycles: np.ndarray
    macs: int
    overall_util_pct: np.ndarray
    dram_ifmap_reads: np.ndarray
    dram_filter_reads: np.ndarray
    dram_ofmap_writes: np.ndarray
    dram_ofmap_reads: np.ndarray
    dram_bytes: np.ndarray
    memory_bound_layers: np.ndarray
    latency_s: np.ndarray | None = None
    layer_names: tuple[str, ...] = ()
    layer_total_cycles: np.ndarray | None = None
    energy_j: np.ndarray | None = None
    energy_breakdown_j: dict[str, np.ndarray] | None = None
    dtype: str = ""

    def __len__(self) -> int:
        return int(self.total_cycles.shape[0])


_SUMMED = ("total_cycles", "compute_cycles", "stall_cycles", "prefetch_cycles", "drain_cycles",
           "dram_ifmap_reads", "dram_filter_reads", "dram_ofmap_writes", "dram_ofmap_reads")


def network_layers(layers: Topology | OpGraph | str | Path | SystolicLayers) -> SystolicLayers:
    """The array layers of a topology (object or CSV path) or of a graph's convolutions and matmuls.

    A graph's convolution is its implicit GEMM per group (``M = N*P*Q``, ``N = K/g``,
    ``K = C/g*R*S``; distinct ifmap words are the input tensor's elements per group), run ``groups``
    times; a batched matmul runs its ``batch`` GEMMs in turn. Other ops (norms, activations,
    pooling) do not use the array and are counted in ``skipped_ops``.
    """
    if isinstance(layers, SystolicLayers):
        return layers
    if isinstance(layers, (str, Path)):
        layers = read_topology(layers)
    if isinstance(layers, Topology):
        a = layers.gemm_arrays()
        if any(x.dtype == object for x in a.values()):
            raise SystolicSweepError(f"{layers.source}: a layer exceeds int64 counts; expected layers whose "
                                     "GEMM sizes fit in 64-bit integers for a sweep")
        return SystolicLayers(names=tuple(layer.name for layer in layers.layers), m=a["m"], n=a["n"], k=a["k"],
                              ifmap_words=a["ifmap_words"], repeat=np.ones(len(layers.layers), dtype=np.int64))
    if isinstance(layers, OpGraph):
        names, m, n, k, ifw, rep = [], [], [], [], [], []
        skipped = 0
        for op in layers:
            if op.kind not in ARRAY_KINDS:
                skipped += 1
                continue
            if op.kind == "matmul":
                bt, mm, nn, kk = gemm_dims(op)
                words = op.inputs[0].numel // max(1, bt)
                g = bt
            else:
                d = conv_dims(op)
                mm, nn, kk, g = d["gemm_m"], d["gemm_n"], d["gemm_k"], d["groups"]
                words = op.inputs[0].numel // g
            names.append(op.name)
            m.append(mm)
            n.append(nn)
            k.append(kk)
            ifw.append(max(1, words))
            rep.append(g)
        if not names:
            raise SystolicSweepError(f"{layers.name}: no convolution or matmul op; got a graph of "
                                     f"{len(list(layers))} ops; expected layers that run on the array")
        arr = [np.array(x, dtype=np.int64) for x in (m, n, k, ifw, rep)]
        return SystolicLayers(tuple(names), *arr, skipped_ops=skipped)
    raise SystolicSweepError(f"systolic sweep: layers; got a {type(layers).__name__}; expected a Topology, a "
                             "topology CSV path or an OpGraph")


def _ints(name: str, value: Any, n: int) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(value))
    if arr.ndim != 1 or arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr)) \
            or not np.all(arr == np.floor(arr)) or (arr.size and arr.min() < 1):
        raise SystolicSweepError(f"systolic sweep: {name}; got {_short(value)}; expected integers >= 1, one value "
                                 "or one per design")
    return _broadcast(name, arr.astype(np.int64), n)


def _short(value: Any) -> str:
    return short_repr(value, 60)


def _broadcast(name: str, arr: np.ndarray, n: int) -> np.ndarray:
    if arr.shape[0] == n:
        return arr
    if arr.shape[0] == 1:
        return np.repeat(arr, n)
    raise SystolicSweepError(f"systolic sweep: {name}; got {arr.shape[0]} values; expected 1 or {n} (one per design)")


def systolic_network_variants(
    layers: Topology | OpGraph | str | Path | SystolicLayers,
    rows: Any,
    cols: Any,
    dataflow: Any,
    ifmap_sram_bytes: Any = None,
    filter_sram_bytes: Any = None,
    ofmap_sram_bytes: Any = None,
    dram_bandwidth_words_per_cycle: Any = None,
    *,
    word_bytes: int = 1,
    clock_hz: float | None = None,
    fold_average: str = "exact",
    per_layer: bool = False,
    dtype: str | None = None,
    energy: SystolicEnergyParams | None = None,
) -> SystolicVariants:
    """Cycles, utilisation, DRAM traffic and energy of a whole network on ``V`` systolic-array designs.

    Parameters
    ----------
    layers
        A :class:`~hwmodels.topology.Topology`, a SCALE-Sim topology CSV path, or an
        :class:`~workloads.ir.OpGraph` (its conv and matmul ops, :func:`network_layers`).
    rows, cols
        PE rows and columns: one value or ``V`` (integers >= 1).
    dataflow
        ``"os"``, ``"ws"``, ``"is"``: one or ``V`` strings; variants are grouped by dataflow.
    ifmap_sram_bytes, filter_sram_bytes, ofmap_sram_bytes
        Scratchpad sizes in bytes (one value or ``V``); all three or none (unbounded scratchpads).
    dram_bandwidth_words_per_cycle
        DRAM bandwidth shared by the operands (words per cycle; one or ``V``); None: ideal memory.
    word_bytes
        Bytes per word (SCALE-Sim's default is 1).
    clock_hz
        Array clock; gives ``latency_s``.
    fold_average
        ``"exact"`` or ``"scalesim"`` (:func:`hwmodels.systolic.gemm_cycles`; the cycles are the same).
    per_layer
        Also return each layer's total cycles per design.
    dtype
        Operand dtype of the MACs for the energy (default: that of a ``word_bytes`` word, int8 for 1 byte).
    energy
        Energy coefficients (:func:`hwmodels.systolic.load_systolic_energy`); None: the sourced defaults.

    Raises
    ------
    SystolicSweepError
        Arrays of different lengths, a non-integer or non-positive size, an unknown dataflow, a
        scratchpad smaller than one word.
    """
    lay = network_layers(layers)
    n, R, C, df, words, bw = _design_arrays(rows, cols, dataflow, ifmap_sram_bytes, filter_sram_bytes,
                                            ofmap_sram_bytes, dram_bandwidth_words_per_cycle, word_bytes, clock_hz)
    params = load_systolic_energy() if energy is None else energy
    try:
        dt = dtype_for_word_bytes(word_bytes) if dtype is None else dtype
        params.mac_j(dt)
    except ValueError as exc:
        raise SystolicSweepError(str(exc)) from None
    sums, parts, mem_bound, per = _accumulate_layers(lay, n, R, C, df, words, bw, word_bytes, clock_hz,
                                                     fold_average, per_layer, dt, params)
    macs = int(np.sum(lay.m * lay.n * lay.k * lay.repeat))
    total = sums["total_cycles"]
    util = 100.0 * macs / (np.maximum(total, 1).astype(float) * R * C)
    dram_words = (sums["dram_ifmap_reads"] + sums["dram_filter_reads"] + sums["dram_ofmap_writes"]
                  + sums["dram_ofmap_reads"])
    return SystolicVariants(
        rows=R, cols=C, dataflow=df.astype(str), macs=macs, overall_util_pct=util, dram_bytes=dram_words * word_bytes,
        memory_bound_layers=mem_bound, latency_s=None if clock_hz is None else total / float(clock_hz),
        layer_names=lay.names if per_layer else (), layer_total_cycles=per,
        energy_j=parts["mac"] + parts["register"] + parts["sram"] + parts["dram"] + parts["static"],
        energy_breakdown_j=parts, dtype=dt, **sums,
    )


def _design_arrays(rows: Any, cols: Any, dataflow: Any, ifmap_sram_bytes: Any, filter_sram_bytes: Any,
                   ofmap_sram_bytes: Any, dram_bandwidth_words_per_cycle: Any, word_bytes: int,
                   clock_hz: float | None) -> tuple[int, np.ndarray, np.ndarray, np.ndarray,
                                                    tuple[np.ndarray, ...] | None, np.ndarray | None]:
    """Check the design arguments and broadcast them to ``V`` designs: (V, rows, cols, dataflow, sram words, bw)."""
    df = np.atleast_1d(np.asarray(dataflow, dtype=object))
    sizes = [np.atleast_1d(np.asarray(x)) for x in (rows, cols, df, ifmap_sram_bytes, filter_sram_bytes,
                                                     ofmap_sram_bytes, dram_bandwidth_words_per_cycle)
             if x is not None]
    lengths = {s.shape[0] for s in sizes if s.ndim == 1 and s.shape[0] != 1}
    if len(lengths) > 1:
        raise SystolicSweepError(f"systolic sweep: value lists of different lengths {sorted(lengths)}; expected "
                                 "one length (one value per design) or single values")
    n = lengths.pop() if lengths else 1
    R = _ints("rows", rows, n)
    C = _ints("cols", cols, n)
    df = _broadcast("dataflow", df, n)
    for d in set(df.tolist()):
        if d not in DATAFLOWS:
            raise SystolicSweepError(f"systolic sweep: dataflow; got {d!r}; expected one of "
                                     f"{', '.join(DATAFLOWS)}{did_you_mean(str(d), DATAFLOWS)}")
    if not isinstance(word_bytes, int) or isinstance(word_bytes, bool) or word_bytes < 1:
        raise SystolicSweepError(f"systolic sweep: word_bytes; got {word_bytes!r}; expected an integer >= 1")
    srams = (ifmap_sram_bytes, filter_sram_bytes, ofmap_sram_bytes)
    words: tuple[np.ndarray, ...] | None = None
    if any(s is not None for s in srams):
        if any(s is None for s in srams):
            raise SystolicSweepError("systolic sweep: scratchpads; got some of ifmap/filter/ofmap sizes; expected "
                                     "all three or none")
        words = tuple(_ints(f"{w}_sram_bytes", s, n) // word_bytes for w, s in zip(("ifmap", "filter", "ofmap"),
                                                                                   srams, strict=True))
        for w, arr in zip(("ifmap", "filter", "ofmap"), words, strict=True):
            if arr.min() < 1:
                raise SystolicSweepError(f"systolic sweep: {w}_sram_bytes; got a scratchpad smaller than one word of "
                                         f"{word_bytes} bytes; expected >= {word_bytes}")
    bw = None
    if dram_bandwidth_words_per_cycle is not None:
        b = np.atleast_1d(np.asarray(dram_bandwidth_words_per_cycle, dtype=float))
        if b.ndim != 1 or not np.all(b > 0) or np.any(np.isnan(b)):
            raise SystolicSweepError(f"systolic sweep: dram_bandwidth_words_per_cycle; got "
                                     f"{_short(dram_bandwidth_words_per_cycle)}; expected numbers > 0")
        bw = _broadcast("dram_bandwidth_words_per_cycle", b, n)
    if clock_hz is not None and not (isinstance(clock_hz, (int, float)) and math.isfinite(clock_hz) and clock_hz > 0):
        raise SystolicSweepError(f"systolic sweep: clock_hz; got {clock_hz!r}; expected a frequency > 0 in Hz")
    return n, R, C, df, words, bw


def _accumulate_layers(lay: SystolicLayers, n: int, R: np.ndarray, C: np.ndarray, df: np.ndarray,
                       words: tuple[np.ndarray, ...] | None, bw: np.ndarray | None, word_bytes: int,
                       clock_hz: float | None, fold_average: str, per_layer: bool, dt: str,
                       params: SystolicEnergyParams) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray],
                                                               np.ndarray, np.ndarray | None]:
    """Sum every layer's cycles, traffic and energy per design, one dataflow group at a time."""
    # unbounded scratchpads hold the network's largest whole operands: priced at that size
    whole = tuple(int(np.max(w)) * word_bytes for w in operand_words(lay.m, lay.n, lay.k, lay.ifmap_words))
    parts = {key: np.zeros(n) for key in ("mac", "register", "sram", "dram", "static")}
    sums = {key: np.zeros(n, dtype=np.int64) for key in _SUMMED}
    mem_bound = np.zeros(n, dtype=np.int64)
    per = np.zeros((len(lay.names), n), dtype=np.int64) if per_layer else None
    for d in DATAFLOWS:
        idx = np.nonzero(df == d)[0]
        if idx.size == 0:
            continue
        sub_words = None if words is None else tuple(w[idx] for w in words)
        sub_bw = None if bw is None else bw[idx]
        for li in range(len(lay.names)):
            r = gemm_cycles(R[idx], C[idx], d, lay.m[li], lay.n[li], lay.k[li], ifmap_words=lay.ifmap_words[li],
                            sram_words=sub_words, dram_words_per_cycle=sub_bw, fold_average=fold_average)
            rep = int(lay.repeat[li])
            for key in _SUMMED:
                sums[key][idx] += rep * np.asarray(getattr(r, key), dtype=np.int64)
            mem_bound[idx] += rep * (np.asarray(r.bound) == "memory")
            sram_bytes = whole if sub_words is None else tuple(w * word_bytes for w in sub_words)
            e = systolic_energy(r, dtype=dt, sram_bytes=sram_bytes, word_bytes=word_bytes,  # type: ignore[arg-type]
                                clock_hz=clock_hz, params=params)
            for key, val in e.breakdown().items():
                parts[key][idx] += rep * val
            if per is not None:
                per[li, idx] = rep * np.asarray(r.total_cycles, dtype=np.int64)
    return sums, parts, mem_bound, per

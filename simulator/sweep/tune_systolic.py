"""The tuning problem of a systolic-array design for one network: array rows and columns, dataflow,
scratchpad budget and its split between ifmap, filter and ofmap (the SCALE-Sim / ZigZag design
question), costed by :func:`hwmodels.systolic.gemm_cycles` over every layer at once.

The area budget is the number of processing elements (``pes = rows * cols``) and the SRAM budget
the scratchpad bytes (``sram_bytes``); constraints on them (``pes<=4096``, ``sram_bytes<=512 KiB``)
are checked before a design is costed. A design's cycles are the sum over the network's layers of
``total_cycles`` (compute, DRAM stalls, exposed prefetch and drain) of the double-buffered memory
model in :mod:`hwmodels.systolic`; with a clock, ``latency_s = cycles / clock``. A design's
``energy_j`` is :func:`hwmodels.systolic.systolic_energy` summed over the layers (MACs, PE-to-PE
registers, scratchpads priced by their size, DRAM, and leakage over ``cycles / clock``, at the clock
given or else the clock of the energy coefficients), which the ``energy`` objective minimises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from simulator.sweep.tune import Axis, SearchSpace, TuneError

__all__ = ["SystolicProblem", "parse_split", "load_network", "DEFAULT_SIDES", "DEFAULT_SPLITS", "SYSTOLIC_OBJECTIVES"]

#: Array sides searched when none are given (PEs per row / column).
DEFAULT_SIDES: tuple[int, ...] = (8, 16, 32, 64, 128)
#: Scratchpad splits ifmap:filter:ofmap searched when none are given.
DEFAULT_SPLITS: tuple[str, ...] = ("1:1:1", "2:1:1", "1:2:1", "1:1:2", "2:2:1", "1:2:2", "2:1:2")
#: Objective name -> (metric, direction) for a systolic design (``latency_s`` when a clock is given).
SYSTOLIC_OBJECTIVES: dict[str, tuple[str, str]] = {"latency": ("cycles", "min"), "throughput": ("cycles", "min"),
                                                   "energy": ("energy_j", "min")}


def parse_split(text: str) -> tuple[int, int, int]:
    """``"2:1:1"`` -> (2, 1, 1): relative shares of ifmap, filter and ofmap scratchpads."""
    parts = text.split(":")
    try:
        vals = tuple(int(p) for p in parts)
    except ValueError:
        vals = ()
    if len(vals) != 3 or min(vals) < 1:
        raise TuneError(f"--sram-split {text!r}: not a split; got {text!r}; expected IFMAP:FILTER:OFMAP positive "
                        "integer shares such as 2:1:1")
    return vals  # type: ignore[return-value]


def load_network(spec: str) -> Any:
    """A SCALE-Sim topology CSV path, or ``gemm:m=..,n=..,k=..`` for one GEMM layer."""
    from hwmodels.topology import parse_topology, read_topology

    if spec.lower().startswith("gemm:"):
        fields: dict[str, int] = {}
        for part in spec[5:].split(","):
            key, _, val = part.partition("=")
            key = key.strip().lower()
            if key not in ("m", "n", "k") or not val.strip().isdigit() or int(val) < 1:
                raise TuneError(f"{spec}: {part.strip()!r}; expected gemm:m=M,n=N,k=K with positive integers")
            fields[key] = int(val)
        if set(fields) != {"m", "n", "k"}:
            raise TuneError(f"{spec}: missing {', '.join(sorted({'m', 'n', 'k'} - set(fields)))}; expected "
                            "gemm:m=M,n=N,k=K")
        return parse_topology(f"Layer, M, N, K,\ngemm, {fields['m']}, {fields['n']}, {fields['k']},\n", spec)
    return read_topology(spec)


class SystolicProblem:
    """Tune an array for ``network`` (a :class:`hwmodels.topology.Topology`).

    Parameters
    ----------
    network
        The layers (SCALE-Sim topology).
    rows, cols
        Array sides to search (PEs).
    dataflows
        ``os``, ``ws``, ``is``.
    sram_kib
        Total scratchpad sizes to search (KiB), split by ``splits``.
    splits
        ifmap:filter:ofmap shares (:func:`parse_split`).
    dram_words_per_cycle
        DRAM bandwidth shared by the operands (words per cycle).
    word_bytes
        Bytes per word (1 as in SCALE-Sim's default).
    clock_hz
        Array clock (Hz); None: no time metrics, cycles only (static energy then accrues at the energy
        coefficients' clock).
    dtype
        Operand dtype of the MACs for the energy; None: that of a ``word_bytes`` word (int8 for 1 byte).
    energy
        Energy coefficients (:func:`hwmodels.systolic.load_systolic_energy`); None: the sourced defaults.
    """

    lower_bound_metrics = frozenset()

    def __init__(self, network: Any, *, rows: Sequence[int] = DEFAULT_SIDES, cols: Sequence[int] = DEFAULT_SIDES,
                 dataflows: Sequence[str] = ("os", "ws", "is"), sram_kib: Sequence[float] = (256.0,),
                 splits: Sequence[str] = DEFAULT_SPLITS, dram_words_per_cycle: float,
                 word_bytes: int = 1, clock_hz: float | None = None, dtype: str | None = None,
                 energy: Any = None) -> None:
        from hwmodels.systolic import DATAFLOWS, dtype_for_word_bytes, load_systolic_energy

        self.network = network
        arrays = network.gemm_arrays()
        self.m, self.n, self.k, self.ifw = arrays["m"], arrays["n"], arrays["k"], arrays["ifmap_words"]
        for d in dataflows:
            if d not in DATAFLOWS:
                from nodeperf.suggest import did_you_mean

                raise TuneError(f"--dataflow: unknown dataflow {d!r}; got {d!r}; expected one of "
                                f"{', '.join(DATAFLOWS)}{did_you_mean(d, DATAFLOWS)}")
        for flag, vals in (("--rows", rows), ("--cols", cols)):
            if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals):
                raise TuneError(f"{flag}: got {list(vals)!r}; expected positive integers")
        if not sram_kib or any(not math.isfinite(s) or s <= 0 for s in sram_kib):
            raise TuneError(f"--sram-kib: got {list(sram_kib)!r}; expected positive sizes in KiB")
        if not (math.isfinite(dram_words_per_cycle) and dram_words_per_cycle > 0):
            raise TuneError(f"--dram-words-per-cycle: got {dram_words_per_cycle!r}; expected a positive number")
        if isinstance(word_bytes, bool) or not isinstance(word_bytes, int) or word_bytes < 1:
            raise TuneError(f"--word-bytes: got {word_bytes!r}; expected a positive integer")
        if clock_hz is not None and not (math.isfinite(clock_hz) and clock_hz > 0):
            raise TuneError(f"--clock: got {clock_hz!r}; expected a positive frequency such as '1 GHz'")
        for s in splits:
            parse_split(s)
        self.energy = load_systolic_energy() if energy is None else energy
        try:
            self.dtype = dtype_for_word_bytes(int(word_bytes)) if dtype is None else dtype
            self.energy.mac_j(self.dtype)
        except ValueError as exc:
            raise TuneError(f"--word-bytes / dtype: {exc}") from None
        self.bw, self.word_bytes, self.clock_hz = float(dram_words_per_cycle), int(word_bytes), clock_hz
        self.space = SearchSpace((
            Axis("rows", tuple(dict.fromkeys(rows)), numeric=True),
            Axis("cols", tuple(dict.fromkeys(cols)), numeric=True),
            Axis("dataflow", tuple(dict.fromkeys(dataflows))),
            Axis("sram_kib", tuple(dict.fromkeys(float(s) for s in sram_kib)), numeric=True),
            Axis("sram_split", tuple(dict.fromkeys(splits))),
        ))
        metrics = {"cycles", "stall_cycles", "util_pct", "pes", "sram_bytes", "dram_words", "energy_j"}
        if clock_hz is not None:
            metrics |= {"latency_s", "throughput_per_s"}
        self.metrics = frozenset(metrics)

    def valid(self, config: Mapping[str, Any]) -> bool:
        return True

    def sram_words(self, config: Mapping[str, Any]) -> tuple[int, int, int]:
        """Scratchpad words (ifmap, filter, ofmap) of a design: the budget split by its shares, rounded down."""
        shares = parse_split(str(config["sram_split"]))
        words = float(config["sram_kib"]) * 1024.0 / self.word_bytes
        return tuple(int(words * s // sum(shares)) for s in shares)  # type: ignore[return-value]

    def precheck(self, config: Mapping[str, Any]) -> tuple[dict[str, float], str]:
        pre = {"pes": float(int(config["rows"]) * int(config["cols"])),
               "sram_bytes": float(config["sram_kib"]) * 1024.0}
        words = self.sram_words(config)
        if min(words) < 1:
            return pre, (f"a scratchpad of the split {config['sram_split']} of {config['sram_kib']:g} KiB holds no "
                         f"word of {self.word_bytes} bytes")
        return pre, ""

    def evaluate(self, config: Mapping[str, Any]) -> dict[str, float]:
        """Metrics of one design (every layer in one broadcast call)."""
        return self.evaluate_many([config])[0]

    def evaluate_many(self, configs: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
        """Metrics of many designs: those sharing a dataflow and scratchpads are costed in one
        :func:`~hwmodels.systolic.gemm_cycles` call broadcasting array sides (rows) against layers
        (columns)."""
        from hwmodels.systolic import gemm_cycles, systolic_energy

        groups: dict[tuple[str, tuple[int, int, int]], list[int]] = {}
        for j, c in enumerate(configs):
            groups.setdefault((str(c["dataflow"]), self.sram_words(c)), []).append(j)
        out: list[dict[str, float]] = [{} for _ in configs]
        for (df, words), members in groups.items():
            rows = np.array([int(configs[j]["rows"]) for j in members], dtype=np.int64)[:, None]
            cols = np.array([int(configs[j]["cols"]) for j in members], dtype=np.int64)[:, None]
            r = gemm_cycles(rows, cols, df, self.m[None, :], self.n[None, :], self.k[None, :],
                            ifmap_words=self.ifw[None, :], sram_words=words, dram_words_per_cycle=self.bw)
            e = systolic_energy(r, dtype=self.dtype, sram_bytes=tuple(w * self.word_bytes for w in words),
                                word_bytes=self.word_bytes, clock_hz=self.clock_hz, params=self.energy)
            energy = e.energy_j.sum(axis=1)
            total = r.total_cycles.sum(axis=1)
            stall = r.stall_cycles.sum(axis=1)
            macs = r.macs.sum(axis=1)
            dram = (r.dram_ifmap_reads.sum(axis=1) + r.dram_filter_reads.sum(axis=1)
                    + r.dram_ofmap_writes.sum(axis=1) + r.dram_ofmap_reads.sum(axis=1))
            for q, j in enumerate(members):
                cycles = int(total[q])
                pes = int(rows[q, 0]) * int(cols[q, 0])
                m = {"cycles": float(cycles), "stall_cycles": float(int(stall[q])),
                     "util_pct": 100.0 * int(macs[q]) / (max(cycles, 1) * pes), "pes": float(pes),
                     "sram_bytes": float(configs[j]["sram_kib"]) * 1024.0, "dram_words": float(int(dram[q])),
                     "energy_j": float(energy[q])}
                if self.clock_hz is not None:
                    m["latency_s"] = cycles / self.clock_hz
                    m["throughput_per_s"] = self.clock_hz / cycles
                out[j] = m
        return out

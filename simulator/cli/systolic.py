"""`nodeperf systolic`: per-layer cycles, utilisation, memory traffic and energy of a SCALE-Sim topology on a
systolic array."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from typing import Any

import numpy as np

from hwmodels.systolic import (
    DATAFLOWS,
    SystolicEnergy,
    SystolicEnergyParams,
    SystolicResult,
    dtype_for_word_bytes,
    gemm_cycles,
    load_systolic_energy,
    operand_words,
    systolic_energy,
)
from hwmodels.topology import Topology, read_topology
from nodeperf.errors import NodeperfError
from simulator.cli.common import nonempty
from simulator.cli.output import check_outputs, to_stdout, write_output

__all__ = ["register", "run", "evaluate_topology", "report_rows", "topology_energy", "CSV_COLUMNS",
           "ENERGY_PARTS"]

BYTES_PER_KIB = 1024

# SCALE-Sim's COMPUTE_REPORT columns first (same names), then ours.
CSV_COLUMNS: tuple[tuple[str, str], ...] = (
    ("LayerID", "layer_id"),
    ("Total Cycles (incl. prefetch)", "total_cycles"),
    ("Total Cycles", "compute_plus_stall_cycles"),
    ("Stall Cycles", "stall_cycles"),
    ("Overall Util %", "overall_util_pct"),
    ("Mapping Efficiency %", "mapping_eff_pct"),
    ("Compute Util %", "compute_util_pct"),
    ("Layer Name", "name"),
    ("Compute Cycles", "compute_cycles"),
    ("Prefetch Cycles", "prefetch_cycles"),
    ("Drain Cycles", "drain_cycles"),
    ("Folds", "folds"),
    ("SRAM IFMAP Reads", "sram_ifmap_reads"),
    ("SRAM Filter Reads", "sram_filter_reads"),
    ("SRAM OFMAP Writes", "sram_ofmap_writes"),
    ("SRAM OFMAP Reads", "sram_ofmap_reads"),
    ("DRAM IFMAP Reads", "dram_ifmap_reads"),
    ("DRAM Filter Reads", "dram_filter_reads"),
    ("DRAM OFMAP Writes", "dram_ofmap_writes"),
    ("DRAM OFMAP Reads", "dram_ofmap_reads"),
    ("Bound", "bound"),
    ("Energy (J)", "energy_j"),
)
#: Parts of the energy split, in report order (keys of ``energy_breakdown_j``).
ENERGY_PARTS: tuple[str, ...] = ("mac", "register", "sram", "dram", "static")

_INT_FIELDS = (
    "total_cycles",
    "compute_cycles",
    "stall_cycles",
    "prefetch_cycles",
    "drain_cycles",
    "folds",
    "m",
    "n",
    "k",
    "sram_ifmap_reads",
    "sram_filter_reads",
    "sram_ofmap_writes",
    "sram_ofmap_reads",
    "dram_ifmap_reads",
    "dram_filter_reads",
    "dram_ofmap_writes",
    "dram_ofmap_reads",
)
_FLOAT_FIELDS = ("overall_util_pct", "mapping_eff_pct", "compute_util_pct")


class SystolicArgError(NodeperfError, ValueError):
    """A command-line argument of `nodeperf systolic` is invalid."""


def _positive_int(flag: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SystolicArgError(f"{flag}: not an integer; got {text!r}; expected an integer >= 1") from None
    if value < 1:
        raise SystolicArgError(f"{flag}: must be positive; got {value}; expected an integer >= 1")
    return value


def _positive_float(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SystolicArgError(f"{flag}: not a number; got {text!r}; expected a number > 0") from None
    if not math.isfinite(value) or value <= 0:
        raise SystolicArgError(f"{flag}: must be a finite number > 0; got {text!r}")
    return value


def _parse_sram_kib(text: str) -> tuple[float, float, float]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise SystolicArgError(
            f"--sram-kib: expected three sizes IFMAP,FILTER,OFMAP in KiB; got {text!r}"
        )
    return tuple(_positive_float(f"--sram-kib ({which})", p) for which, p in  # type: ignore[return-value]
                 zip(("ifmap", "filter", "ofmap"), parts, strict=True))


def evaluate_topology(
    topology: Topology,
    rows: int,
    cols: int,
    dataflow: str,
    *,
    sram_words: tuple[int, int, int] | None = None,
    dram_words_per_cycle: float | None = None,
) -> SystolicResult:
    """All layers of ``topology`` in one broadcast call (SCALE-Sim's fold averaging, bit-exact)."""
    a = topology.gemm_arrays()
    return gemm_cycles(
        rows,
        cols,
        dataflow,
        a["m"],
        a["n"],
        a["k"],
        ifmap_words=a["ifmap_words"],
        sram_words=sram_words,
        dram_words_per_cycle=dram_words_per_cycle,
        fold_average="scalesim",
    )


def topology_energy(
    topology: Topology,
    result: SystolicResult,
    *,
    dtype: str,
    word_bytes: int,
    sram_words: tuple[int, int, int] | None,
    clock_hz: float | None = None,
    params: SystolicEnergyParams | None = None,
) -> SystolicEnergy:
    """Energy of every layer of ``result`` (the layers of ``topology`` on one array).

    The scratchpads are priced at ``sram_words``; unbounded ones (None) at the largest whole operand
    of the network, the smallest scratchpads that hold every operand as the unbounded model assumes.
    """
    if sram_words is None:
        a = topology.gemm_arrays()
        sram_words = tuple(int(np.max(w)) for w in operand_words(a["m"], a["n"], a["k"],  # type: ignore[assignment]
                                                                 a["ifmap_words"]))
    assert sram_words is not None
    return systolic_energy(result, dtype=dtype, sram_bytes=tuple(w * word_bytes for w in sram_words),  # type: ignore[arg-type]
                           word_bytes=word_bytes, clock_hz=clock_hz, params=params)


def report_rows(topology: Topology, result: SystolicResult, energy: SystolicEnergy | None = None
                ) -> list[dict[str, Any]]:
    """One plain dict per layer (ints, floats, strings) in file order; with ``energy``, its split per layer."""
    out = []
    for i, layer in enumerate(topology.layers):
        row: dict[str, Any] = {"layer_id": i, "name": layer.name, "line": layer.line}
        for key in _INT_FIELDS:
            row[key] = int(getattr(result, key)[i])
        for key in _FLOAT_FIELDS:
            row[key] = float(getattr(result, key)[i])
        row["compute_plus_stall_cycles"] = row["compute_cycles"] + row["stall_cycles"]
        row["bound"] = str(result.bound[i])
        if energy is not None:
            row["energy_j"] = float(energy.energy_j[i])
            row["energy_breakdown_j"] = {k: float(v[i]) for k, v in energy.breakdown().items()}
        out.append(row)
    return out


def _csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([title for title, _ in CSV_COLUMNS])
    for r in rows:
        w.writerow([r[key] for _, key in CSV_COLUMNS])
    return buf.getvalue()


def _fmt_j(x: float) -> str:
    """An energy in J with an SI prefix (4 significant digits)."""
    for scale, unit in ((1.0, "J"), (1e-3, "mJ"), (1e-6, "uJ"), (1e-9, "nJ"), (1e-12, "pJ")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x / 1e-12:.4g} pJ" if x else "0 J"


def _table(rows: list[dict[str, Any]], totals: dict[str, Any]) -> str:
    head = ("layer", "total cyc", "compute cyc", "stall cyc", "util %", "map eff %", "bound", "energy")
    body = [
        (
            r["name"],
            f"{r['total_cycles']:,}",
            f"{r['compute_cycles']:,}",
            f"{r['stall_cycles']:,}",
            f"{r['overall_util_pct']:.2f}",
            f"{r['mapping_eff_pct']:.2f}",
            r["bound"],
            _fmt_j(r["energy_j"]),
        )
        for r in rows
    ]
    body.append(
        ("TOTAL", f"{totals['total_cycles']:,}", f"{totals['compute_cycles']:,}",
         f"{totals['stall_cycles']:,}", "", "", "", _fmt_j(totals["energy_j"]))
    )
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    lines = []
    for j, r in enumerate([head, *body]):
        cells = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
        if j == 0 or j == len(body) - 1:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _energy_lines(totals: dict[str, Any]) -> str:
    total = totals["energy_j"]
    parts = totals["energy_breakdown_j"]
    split = ", ".join(f"{name.upper() if name in ('mac', 'sram', 'dram') else name} {_fmt_j(parts[name])}"
                      f" ({100.0 * parts[name] / total if total else 0.0:.1f} %)" for name in ENERGY_PARTS)
    return (f"energy {_fmt_j(total)} at {totals['clock_hz'] / 1e6:g} MHz ({totals['latency_s'] * 1e3:.4g} ms), "
            f"{totals['dtype']} MACs, {totals['word_bytes']}-byte words, {totals['technology_node']} coefficients "
            f"({'; '.join(totals['energy_files'])})\n  {split}")


def _file_label(path: str) -> str:
    """The defaults file by its path in the repository; other files as given."""
    from hwmodels.systolic import DEFAULT_ENERGY_FILE

    return "hwmodels/catalog/defaults/systolic_energy.toml" if path == str(DEFAULT_ENERGY_FILE) else path


def _energy_params(args: argparse.Namespace) -> SystolicEnergyParams:
    overrides: dict[str, str] = {}
    for item in args.energy_set or ():
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise SystolicArgError(f"--energy-set: not PATH=VALUE; got {item!r}; expected e.g. "
                                   "dram.j_per_byte='20 pJ/B'")
        overrides[key.strip()] = value.strip().strip("'\"")
    return load_systolic_energy(args.energy, overrides)


def _dtype_and_word_bytes(args: argparse.Namespace, params: SystolicEnergyParams) -> tuple[str, int]:
    """``--dtype`` and ``--word-bytes``, each defaulting from the other (int8 and 1 byte when neither is given)."""
    from workloads.dtypes import DType

    word_bytes = None if args.word_bytes is None else _positive_int("--word-bytes", str(args.word_bytes))
    dtype = args.dtype
    if dtype is None:
        dtype = "int8" if word_bytes is None else dtype_for_word_bytes(word_bytes)
    params.mac_j(dtype)  # an unknown dtype fails here, with the known ones listed
    if word_bytes is None:
        bits = DType(dtype).bits if dtype in {d.value for d in DType} else 0
        if bits < 8 or bits % 8:
            raise SystolicArgError(f"--word-bytes: missing; got --dtype {dtype} of no whole-byte width; expected "
                                   "--word-bytes N")
        word_bytes = bits // 8
    return dtype, word_bytes


def run(args: argparse.Namespace) -> int:
    """Evaluate the topology and print a table or JSON; write the CSV report if asked."""
    from hwmodels.units import UnitError, parse_quantity

    check_outputs(("--out", args.out), json_flag=args.json)
    rows = _positive_int("--rows", str(args.rows))
    cols = _positive_int("--cols", str(args.cols))
    params = _energy_params(args)
    dtype, word_bytes = _dtype_and_word_bytes(args, params)
    clock = params.clock_hz
    if args.clock is not None:
        try:
            clock = parse_quantity(args.clock, "Hz")
        except UnitError as exc:
            raise SystolicArgError(f"--clock: {exc}") from None
        if not clock > 0:
            raise SystolicArgError(f"--clock: not a positive frequency; got {args.clock!r}; expected e.g. '700 MHz'")
        if clock == float("inf"):  # '1e300 GHz' overflows
            raise SystolicArgError(f"--clock: not a finite frequency; got {args.clock!r} (beyond a float); expected "
                                   "e.g. '700 MHz'")
    sram_kib = _parse_sram_kib(args.sram_kib) if args.sram_kib is not None else None
    bw = (
        _positive_float("--dram-words-per-cycle", str(args.dram_words_per_cycle))
        if args.dram_words_per_cycle is not None
        else None
    )
    sram_words = None
    if sram_kib is not None:
        sram_words = tuple(int(kib * BYTES_PER_KIB // word_bytes) for kib in sram_kib)
        if min(sram_words) < 1:
            raise SystolicArgError(
                f"--sram-kib: a scratchpad holds no word of {word_bytes} bytes; got {args.sram_kib!r}"
            )
    topology = read_topology(args.topology)
    result = evaluate_topology(
        topology, rows, cols, args.dataflow, sram_words=sram_words, dram_words_per_cycle=bw  # type: ignore[arg-type]
    )
    energy = topology_energy(topology, result, dtype=dtype, word_bytes=word_bytes,
                             sram_words=sram_words, clock_hz=clock, params=params)  # type: ignore[arg-type]
    layer_rows = report_rows(topology, result, energy)
    totals: dict[str, Any] = {
        key: sum(r[key] for r in layer_rows)
        for key in ("total_cycles", "compute_cycles", "stall_cycles")
    }
    totals["energy_j"] = float(np.sum(energy.energy_j))
    totals["energy_breakdown_j"] = {k: float(np.sum(v)) for k, v in energy.breakdown().items()}
    totals["clock_hz"] = clock
    totals["latency_s"] = totals["total_cycles"] / clock
    totals["dtype"] = dtype
    totals["word_bytes"] = word_bytes
    totals["technology_node"] = params.technology_node
    totals["energy_files"] = [_file_label(f) for f in params.source_files]
    if args.out is not None:
        write_output("--out", args.out, _csv_text(layer_rows))
        if to_stdout(args.out):  # the CSV is all standard output shows
            return 0
    if args.json:
        doc = {
            "topology": str(args.topology),
            "rows": rows,
            "cols": cols,
            "dataflow": args.dataflow,
            "sram_words": list(sram_words) if sram_words else None,
            "dram_words_per_cycle": bw,
            "layers": layer_rows,
            **totals,
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_table(layer_rows, totals) + "\n" + _energy_lines(totals) + "\n")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``systolic`` subcommand to the `nodeperf` parser."""
    p = subparsers.add_parser(
        "systolic",
        help="cycles, utilisation, memory traffic and energy of a topology on a systolic array",
        description=(
            "Evaluate a SCALE-Sim topology CSV (convolution rows 'name, ifmap_h, ifmap_w, "
            "filter_h, filter_w, channels, num_filters, stride' and GEMM rows 'name, M, N, K') on "
            "an R x C systolic array. Compute cycles, utilisation and SRAM accesses equal "
            "SCALE-Sim v3's; stalls, prefetch/drain and DRAM traffic come from a double-buffered "
            "memory model (see hwmodels.systolic). Energy: MACs, PE-to-PE registers, scratchpads (priced "
            "by their size), DRAM and leakage, from the sourced 45 nm coefficients of "
            "hwmodels/catalog/defaults/systolic_energy.toml (--energy, --energy-set to change them)."
        ),
    )
    p.add_argument("--rows", required=True, help="PE rows of the array")
    p.add_argument("--cols", required=True, help="PE columns of the array")
    p.add_argument("--dataflow", required=True, choices=DATAFLOWS, help="os | ws | is")
    p.add_argument("--topology", type=nonempty, required=True, help="SCALE-Sim topology CSV file")
    p.add_argument(
        "--sram-kib",
        metavar="IFMAP,FILTER,OFMAP",
        help="scratchpad sizes in KiB (default: unbounded, each operand crosses DRAM once)",
    )
    p.add_argument(
        "--word-bytes",
        help="bytes per word of the scratchpads and traffic (default: the --dtype's width; 1, SCALE-Sim's word "
             "size, when neither is given)",
    )
    p.add_argument("--dtype", help="operand dtype of the MACs for the energy: int8, bf16, fp16, fp32 (default: "
                                   "from --word-bytes, int8 for 1-byte words)")
    p.add_argument("--clock", metavar="FREQ", help="array clock, e.g. '700 MHz': static energy accrues over "
                                                   "total cycles / clock (default: clock.hz of the energy file)")
    p.add_argument("--energy", type=nonempty, metavar="FILE.toml", help="energy coefficients overlaid on "
                                                         "hwmodels/catalog/defaults/systolic_energy.toml")
    p.add_argument("--energy-set", metavar="PATH=VALUE", action="append",
                   help="one energy coefficient, e.g. dram.j_per_byte='20 pJ/B' (repeatable)")
    p.add_argument(
        "--dram-words-per-cycle",
        metavar="W",
        help="DRAM bandwidth shared by the three operands, words per cycle (default: ideal memory)",
    )
    p.add_argument("--out", metavar="REPORT.csv", help="write the per-layer CSV report here (- for standard "
                                                       "output, instead of the table)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)

"""`nodeperf systolic`: per-layer cycles, utilisation and memory traffic of a SCALE-Sim topology on a systolic array."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from typing import Any

from hwmodels.systolic import DATAFLOWS, SystolicResult, gemm_cycles
from hwmodels.topology import Topology, read_topology
from simulator.cli.output import check_outputs, to_stdout, write_output

__all__ = ["register", "run", "evaluate_topology", "report_rows", "CSV_COLUMNS"]

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
)

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


class SystolicArgError(ValueError):
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


def report_rows(topology: Topology, result: SystolicResult) -> list[dict[str, Any]]:
    """One plain dict per layer (ints, floats, strings) in file order."""
    out = []
    for i, layer in enumerate(topology.layers):
        row: dict[str, Any] = {"layer_id": i, "name": layer.name, "line": layer.line}
        for key in _INT_FIELDS:
            row[key] = int(getattr(result, key)[i])
        for key in _FLOAT_FIELDS:
            row[key] = float(getattr(result, key)[i])
        row["compute_plus_stall_cycles"] = row["compute_cycles"] + row["stall_cycles"]
        row["bound"] = str(result.bound[i])
        out.append(row)
    return out


def _csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([title for title, _ in CSV_COLUMNS])
    for r in rows:
        w.writerow([r[key] for _, key in CSV_COLUMNS])
    return buf.getvalue()


def _table(rows: list[dict[str, Any]], totals: dict[str, int]) -> str:
    head = ("layer", "total cyc", "compute cyc", "stall cyc", "util %", "map eff %", "bound")
    body = [
        (
            r["name"],
            f"{r['total_cycles']:,}",
            f"{r['compute_cycles']:,}",
            f"{r['stall_cycles']:,}",
            f"{r['overall_util_pct']:.2f}",
            f"{r['mapping_eff_pct']:.2f}",
            r["bound"],
        )
        for r in rows
    ]
    body.append(
        ("TOTAL", f"{totals['total_cycles']:,}", f"{totals['compute_cycles']:,}",
         f"{totals['stall_cycles']:,}", "", "", "")
    )
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    lines = []
    for j, r in enumerate([head, *body]):
        cells = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
        if j == 0 or j == len(body) - 1:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Evaluate the topology and print a table or JSON; write the CSV report if asked."""
    check_outputs(("--out", args.out), json_flag=args.json)
    rows = _positive_int("--rows", str(args.rows))
    cols = _positive_int("--cols", str(args.cols))
    word_bytes = _positive_int("--word-bytes", str(args.word_bytes))
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
    layer_rows = report_rows(topology, result)
    totals = {
        key: sum(r[key] for r in layer_rows)
        for key in ("total_cycles", "compute_cycles", "stall_cycles")
    }
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
        sys.stdout.write(_table(layer_rows, totals) + "\n")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``systolic`` subcommand to the `nodeperf` parser."""
    p = subparsers.add_parser(
        "systolic",
        help="cycles, utilisation and memory traffic of a topology on a systolic array",
        description=(
            "Evaluate a SCALE-Sim topology CSV (convolution rows 'name, ifmap_h, ifmap_w, "
            "filter_h, filter_w, channels, num_filters, stride' and GEMM rows 'name, M, N, K') on "
            "an R x C systolic array. Compute cycles, utilisation and SRAM accesses equal "
            "SCALE-Sim v3's; stalls, prefetch/drain and DRAM traffic come from a double-buffered "
            "memory model (see hwmodels.systolic)."
        ),
    )
    p.add_argument("--rows", required=True, help="PE rows of the array")
    p.add_argument("--cols", required=True, help="PE columns of the array")
    p.add_argument("--dataflow", required=True, choices=DATAFLOWS, help="os | ws | is")
    p.add_argument("--topology", required=True, help="SCALE-Sim topology CSV file")
    p.add_argument(
        "--sram-kib",
        metavar="IFMAP,FILTER,OFMAP",
        help="scratchpad sizes in KiB (default: unbounded, each operand crosses DRAM once)",
    )
    p.add_argument(
        "--word-bytes",
        default="1",
        help="bytes per word for --sram-kib (default 1, SCALE-Sim's word size)",
    )
    p.add_argument(
        "--dram-words-per-cycle",
        metavar="W",
        help="DRAM bandwidth shared by the three operands, words per cycle (default: ideal memory)",
    )
    p.add_argument("--out", metavar="REPORT.csv", help="write the per-layer CSV report here (- for standard "
                                                       "output, instead of the table)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)

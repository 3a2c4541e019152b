"""`nodeperf validate --dataset training [FILE.csv]`: published training runs by device family and recipe."""

from __future__ import annotations

import argparse
import json
from typing import Any


def run_training(args: argparse.Namespace) -> int:
    """Predict the training dataset (nothing fitted) and print the per-group table, or ``--json``."""
    from simulator.parallel.training_validation import training_summary, validate_training

    if args.hardware or args.calibration:
        raise ValueError("validate --dataset training: --hardware/--calibration given; expected neither (each row "
                         "names its hardware and recipe)")
    if args.plot is not None:
        raise ValueError(f"validate --dataset training: --plot {args.plot} given; expected no --plot (the metrics "
                         "differ in kind; the table lists them per group)")
    results = validate_training(args.measurements)
    summary = training_summary(results)
    if args.json:
        print(json.dumps({"summary": summary, "rows": [r.to_json() for r in results]}, indent=2, sort_keys=True))
    else:
        print_training(summary, results)
    return 0


def _fig(stats: dict[str, Any] | None) -> str:
    if not stats or not stats.get("n"):
        return "-"
    return f"{stats['mape']:.1f} ({stats['bias']:+.1f}) n={stats['n']}"


def print_training(summary: dict[str, Any], results: list[Any]) -> None:
    """Per group (device family x recipe): throughput and memory MAPE (bias) of the predicted rows, the
    fits verdicts, counts, and the labelled nearest-recipe figures of the rows not statable yet."""
    from simulator.report.formatting import table

    s = summary
    print(f"training runs (published_training.csv, unfitted): {s['rows']} rows; {s['predicted']} predicted, "
          f"{s['not_statable_yet']} not statable yet, {s['skipped']} skipped")
    o = s["overall"]
    print(f"  predicted rows: throughput MAPE (bias) {_fig(o['throughput'])}; peak memory "
          f"{_fig(o.get('peak_memory_gib'))}; fits verdict right on {o['fits_right']}/{o['fits_total']}")
    _print_oom(s)
    rows = []
    for name, g in s["groups"].items():
        near = g["nearest_recipe"]
        rows.append([name, str(g["listed"]["predicted"]), str(g["listed"]["not_statable_yet"]),
                     str(g["listed"]["skipped"]), _fig(g["throughput"]), _fig(g.get("peak_memory_gib")),
                     f"{g['fits_right']}/{g['fits_total']}" if g["fits_total"] else "-",
                     _fig(near["throughput"]), _fig(near.get("peak_memory_gib"))])
    print(table(rows, ["group", "pred", "not yet", "skip", "throughput MAPE % (bias)", "memory MAPE % (bias)",
                       "fits", "nearest-recipe thr.", "nearest-recipe mem."], align="lrrrlllll"))
    print("  nearest-recipe columns: rows not statable yet, each unstatable piece replaced by the closest statable "
          "one (an approximation, not a score)")
    print("  not statable yet / skipped, by what:")
    for what, n in s["reasons"].items():
        print(f"    {n:4d}  {what}")
    if s["worst"]:
        print("  largest errors of the predicted rows:")
        for r in s["worst"][:3]:
            print(f"    {r['id']}  {r['model']} on {r['system']} ({r['recipe']}): {r['metric']} predicted "
                  f"{r['predicted']:.4g}, measured {r['measured']:.4g} ({r['error_pct']:+.1f}%)")


def _print_oom(summary: dict[str, Any]) -> None:
    """The runs a source says ran out of device memory: each one's predicted worst-device GiB and verdict."""
    o, rows = summary["overall"], summary.get("oom_rows", [])
    if not rows:
        return
    print(f"  runs that failed for memory: predicted not to fit on {o['oom_right']}/{o['oom_total']} predicted")
    for r in rows:
        fits = r["fits"] if r["status"] == "predicted" else r["nearest_fits"]
        gib = r["predicted"] if r["status"] == "predicted" else r["nearest"]
        verdict = "-" if fits is None else ("fits (wrong)" if fits else "does not fit (right)")
        pred = "-" if gib is None else f"{gib:.1f}"
        print(f"    {r['id']}  {r['model']} on {r['system'] or '-'} ({r['recipe']}, {r['status']}): predicted "
              f"{pred} GiB of {r['measured']:.1f} GiB exceeded: {verdict}")

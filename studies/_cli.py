"""The command line every `config -> CSV -> figure` study shares: ``--reduced``, ``--out``, ``--figures``,
``--plot-only``; errors in a configuration or a missing CSV print one line and exit 2."""

from __future__ import annotations

import argparse
import csv
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def rows_step(run: Callable[[dict[str, Any]], list[dict[str, Any]]], load_config: Callable[[bool], dict[str, Any]],
              write_csv: Callable[[list[dict[str, Any]], Path], Any], csv_name: str) -> Callable[[bool, Path], str]:
    """The usual compute step: run the (reduced) configuration and write its rows to ``OUT/csv_name``."""
    def step(reduced: bool, out: Path) -> str:
        rows = run(load_config(reduced))
        path = out / csv_name
        write_csv(rows, path)
        return f"{len(rows)} rows -> {path}"

    return step


def study_main(argv: Sequence[str] | None, *, name: str, description: str, out_dir: Path,
               compute: Callable[[bool, Path], str], draw: Callable[[Path, Path, bool], Sequence[Path]],
               results: str = "results.csv") -> int:
    """Parse the study options, run ``compute(reduced, out)`` (unless ``--plot-only``; it returns the line to
    print) and ``draw(out, figures, reduced)`` (the figure paths written)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--reduced", action="store_true", help="the small configuration the tests run")
    p.add_argument("--out", type=Path, default=out_dir,
                   help=f"folder of {results} (default out/{name}/ under the repository root)")
    p.add_argument("--figures", type=Path, help="folder of the figures (default: the --out folder)")
    p.add_argument("--plot-only", action="store_true", help="redraw the figures from the CSV in --out")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    try:
        if not args.plot_only:
            print(compute(args.reduced, args.out))
        figures = draw(args.out, args.figures or args.out, args.reduced)
    except (FileNotFoundError, ValueError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    for f in figures:
        print(f"figure -> {f}")
    return 0


def run_to_csv(name: str, compute: Callable[[], list[dict[str, Any]]], write_csv: Callable[[list[dict[str, Any]], Path], Any],
               out: Path) -> int:
    """The compute-and-write step of a study whose ``--out`` names the CSV: rows from ``compute()`` written by
    ``write_csv`` to ``out``; a configuration or output error prints one line and returns 2."""
    try:
        rows = compute()
        write_csv(rows, out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} rows -> {out}")
    return 0


def write_rows(rows: Sequence[dict[str, Any]], out: Path, columns: Sequence[str]) -> None:
    """Write ``rows`` to the CSV ``out`` under ``columns`` (floats to 6 significant digits), creating its folder.
    A folder for ``out`` is refused with a ValueError naming the file to give instead."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; expected the CSV file to write (e.g. {out / 'results.csv'})")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})

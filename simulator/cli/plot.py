"""`nodeperf plot`: publication figures (roofline, time breakdown, Pareto front, heatmap, serving latency) as
PNG, PDF or SVG.

Five kinds, each a sub-command::

    nodeperf plot roofline MODEL --hardware H [model and evaluation options as predict] -o fig.png
    nodeperf plot breakdown MODEL --hardware H [--hardware H2 ...] [--by kind|bound] -o fig.pdf
    nodeperf plot pareto RESULTS --x latency_s --y energy_j [--hue device] [--where EXPR] -o fig.svg
    nodeperf plot heatmap RESULTS --x A --y B --value M [--agg min] [--where EXPR] -o fig.png
    nodeperf plot serving REQUESTS.csv [REQUESTS2.csv ...] -o fig.png

RESULTS is a sweep store (``.sqlite``/``.db``, read with ``simulator.sweep.load_results``) or a CSV
file; ``--where EXPR`` keeps the rows that `nodeperf sweep show --where` keeps. The drawing is :mod:`simulator.report.figures`; this module parses arguments and reads inputs.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from nodeperf.errors import NodeperfError
from simulator.cli.common import add_model_args, nonempty

__all__ = ["register", "run", "read_results", "PlotArgError"]

FORMATS = (".png", ".pdf", ".svg")
SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


class PlotArgError(NodeperfError, ValueError):
    """An argument or input of `nodeperf plot` is invalid; the message locates it."""


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", required=True, metavar="FIG",
                   help="figure to write; the format follows the extension: .png (300 dpi), .pdf or .svg")
    p.add_argument("--title", help="figure title (default: one naming what is drawn)")


def _add_hardware(p: argparse.ArgumentParser, *, many: bool) -> None:
    """The hardware and evaluation options of `nodeperf predict`, with the same names and meaning."""
    if many:
        p.add_argument("--hardware", required=True, action="append", metavar="NAME",
                       help="catalog device or system name, or a TOML path; repeat for bars side by side")
    else:
        p.add_argument("--hardware", required=True, metavar="NAME",
                       help="catalog device or system name (see `nodeperf hardware`) or a device/system TOML path")
    p.add_argument("--calibration", type=nonempty, metavar="OVERLAY.toml",
                   help="apply a calibration overlay written by `nodeperf calibrate`")
    p.add_argument("--fusion", action=argparse.BooleanOptionalAction, default=None,
                   help="fuse elementwise ops into their producer kernel (default: on for TPUs, off for GPUs)")
    p.add_argument("--cuda-graphs", action="store_true", help="kernels replayed from a CUDA graph (lower launch floor)")
    p.add_argument("--no-power-cap", dest="power_cap", action="store_false",
                   help="do not stretch ops whose average power would exceed the TDP")
    p.add_argument("--tf32", action="store_true", help="fp32 contractions use TF32 tensor cores")
    from simulator.engines.analytical import CONV_LAYOUTS

    p.add_argument("--conv-layout", choices=CONV_LAYOUTS,
                   help="memory format of convolution activations (default nhwc; nchw: cuDNN's layout transforms "
                        "around each tensor-core convolution)")


def _add_table(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", metavar="RESULTS",
                   help="sweep results: a store written by `nodeperf sweep` (.sqlite) or a CSV file")
    p.add_argument("--x", required=True, metavar="COLUMN", help="column of the x axis (e.g. latency_s)")
    p.add_argument("--y", required=True, metavar="COLUMN", help="column of the y axis (e.g. energy_j)")
    p.add_argument("--where", action="append", metavar="EXPR",
                   help="keep only the rows where EXPR holds, as `nodeperf sweep show --where` (e.g. "
                        "\"batch >= 8 and latency_s < 0.01\"); repeat to require several")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a figure: roofline, time breakdown, Pareto front or heatmap",
        description="Draw a publication figure (300 dpi PNG, PDF or SVG by the extension of -o): the roofline of "
                    "every op of a model on a device, its time by op kind or bound, or the Pareto front or a "
                    "two-axis heatmap of sweep results.",
    )
    kinds = p.add_subparsers(dest="kind", metavar="KIND", parser_class=type(p))
    kinds.required = True

    r = kinds.add_parser("roofline", help="every op of MODEL at its arithmetic intensity and achieved FLOP/s",
                         description="Roofline of MODEL on one device: every op at its arithmetic intensity and "
                                     "achieved rate, the memory and compute roofs of the dtype, the ridge point.")
    add_model_args(r)
    _add_hardware(r, many=False)
    r.add_argument("--roof-dtype", type=nonempty, metavar="DTYPE",
                   help="dtype of the compute roof (default: the one most contraction FLOPs ran at)")
    _add_output(r)
    r.set_defaults(func=run)

    b = kinds.add_parser("breakdown", help="stacked bars of MODEL's time by op kind or by bound",
                         description="Stacked bars of MODEL's predicted time by op kind or by bound, one bar per "
                                     "--hardware.")
    add_model_args(b)
    _add_hardware(b, many=True)
    b.add_argument("--by", default="kind", metavar="kind|bound", help="split the bars by op kind (default) or bound")
    b.add_argument("--top", type=int, default=8, help="op kinds with their own colour (default 8; the rest: other)")
    _add_output(b)
    b.set_defaults(func=run)

    pa = kinds.add_parser("pareto", help="Pareto front of two result columns",
                          description="Scatter of two columns of sweep results with the Pareto front (both "
                                      "minimised unless --max-x / --max-y).")
    _add_table(pa)
    pa.add_argument("--hue", metavar="COLUMN", help="column that colours the points (one front per value)")
    pa.add_argument("--max-x", action="store_true", help="maximise x (e.g. throughput) instead of minimising it")
    pa.add_argument("--max-y", action="store_true", help="maximise y instead of minimising it")
    pa.add_argument("--logx", action="store_true", help="logarithmic x axis")
    pa.add_argument("--logy", action="store_true", help="logarithmic y axis")
    pa.add_argument("--no-front", dest="front", action="store_false", help="only the points, no front")
    _add_output(pa)
    pa.set_defaults(func=run)

    h = kinds.add_parser("heatmap", help="one result column over two axes",
                         description="Heatmap of --value over the distinct values of --x and --y; rows sharing "
                                     "a cell are reduced with --agg.")
    _add_table(h)
    h.add_argument("--value", required=True, metavar="COLUMN", help="column shown by colour")
    h.add_argument("--agg", default="min", metavar="min|max|mean|median|sum|count",
                   help="how rows of one cell are reduced (default min: the best design of the cell)")
    h.add_argument("--log", action="store_true", help="logarithmic colour scale")
    _add_output(h)
    h.set_defaults(func=run)

    sv = kinds.add_parser("serving", help="latency CDFs of serving runs and TTFT/TPOT against load",
                          description="Latency of `nodeperf serve --csv` runs: TTFT and TPOT distributions, and "
                                      "with two runs or more their p50/p99 against the achieved load.")
    sv.add_argument("results", metavar="REQUESTS.csv", nargs="+", help="per-request CSV written by `nodeperf serve --csv`")
    _add_output(sv)
    sv.set_defaults(func=run)


def _check_out(path: str) -> None:
    from simulator.cli.output import check_outputs

    ext = Path(path).suffix.lower()
    if ext not in FORMATS:
        raise PlotArgError(f"plot: -o {path}: unknown figure format; got {ext or 'no extension'!r}; expected a path "
                           f"ending in .png, .pdf or .svg")
    check_outputs(("-o", path), no_stdout=("-o",))


def read_results(path: str | Path) -> Any:
    """Sweep results as a pandas DataFrame: a sweep store (``.sqlite``, ``.sqlite3``, ``.db``) read with
    ``simulator.sweep.load_results``, or a CSV file.

    Raises
    ------
    FileNotFoundError
        No such file.
    PlotArgError
        A file that is neither, an empty or unreadable one.
    """
    import pandas as pd

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such results file; got {str(p)!r}; expected a sweep store (.sqlite) or a CSV")
    if p.is_dir():
        raise PlotArgError(f"{p}: is a folder; got {str(p)!r}; expected a sweep store (.sqlite) or a CSV file")
    suffix = p.suffix.lower()
    if suffix in SQLITE_SUFFIXES:
        try:
            from simulator.sweep import load_results
        except ImportError:
            raise PlotArgError(f"{p}: a sweep store needs simulator.sweep.load_results, which this installation "
                               "lacks; expected a CSV file instead") from None
        return load_results(p)
    if suffix != ".csv":
        raise PlotArgError(f"{p}: unknown results format; got {suffix or 'no extension'!r}; expected "
                           f"{', '.join(SQLITE_SUFFIXES)} (a sweep store) or .csv")
    try:
        df = pd.read_csv(p)
    except pd.errors.EmptyDataError:
        raise PlotArgError(f"{p}: empty file; got no header; expected a CSV with a header row") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise PlotArgError(f"{p}: not a readable CSV; got {str(exc).splitlines()[0]}; expected a CSV with a header "
                           "row") from None
    if df.empty:
        raise PlotArgError(f"{p}: no rows; got only a header ({', '.join(map(str, df.columns))}); expected results")
    return df


def _selected(args: argparse.Namespace) -> Any:
    """The rows of ``args.results`` that every ``--where`` accepts (the evaluator and errors of
    `nodeperf sweep show --where`): a store's axes, metrics, ``error`` and ``experiment``, or a CSV's columns."""
    from simulator.cli.sweep import where_rows

    df = read_results(args.results)
    if not args.where:
        return df
    where = f"plot {args.kind}"
    if Path(args.results).suffix.lower() in SQLITE_SUFFIXES:
        from simulator.sweep.store import store_kind_of

        cols = store_kind_of(args.results).get("columns", {})
        known = [c for c, v in cols.items() if v["role"] == "axis"] + \
                [c for c, v in cols.items() if v["role"] == "metric"] + ["error", "experiment"]
    else:
        known = [str(c) for c in df.columns]
    try:
        sel = where_rows(df, args.where, known, where)
    except ValueError as exc:
        raise PlotArgError(str(exc)) from None
    if sel.empty:
        raise PlotArgError(f"{where}: --where: no row of {len(df)} in {args.results} meets "
                           f"{' and '.join(repr(w) for w in args.where)}; expected at least one row to draw")
    return sel


def _evaluate(args: argparse.Namespace, hardware: str) -> tuple[Any, Any]:
    from simulator.cli.common import check_profile_hardware, graph_from_args
    from simulator.cli.predict import eval_options
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware

    spec = load_hardware(hardware, args.calibration)
    check_profile_hardware(args, spec)
    report = evaluate(graph_from_args(args), spec, eval_options(args))
    return report, spec


def run(args: argparse.Namespace) -> int:
    from simulator.report import figures

    if not args.verbose:  # a figure is the output; the prediction's warnings are in it or in `predict`
        logging.getLogger("simulator").setLevel(logging.ERROR)
    _check_out(args.out)
    if args.kind == "roofline":
        report, spec = _evaluate(args, args.hardware)
        fig = figures.roofline_figure(report, spec, dtype=args.roof_dtype, title=args.title)
        what = f"roofline of {len(report.records)} ops of {report.model} on {report.hardware}"
    elif args.kind == "breakdown":
        if args.by not in ("kind", "bound"):
            from nodeperf.suggest import did_you_mean

            raise PlotArgError(f"plot breakdown: --by {args.by}: unknown split; got {args.by!r}; expected kind or "
                               f"bound{did_you_mean(args.by, ('kind', 'bound'))}")
        if args.top < 1:
            raise PlotArgError(f"plot breakdown: --top: got {args.top}; expected a positive integer")
        reports = [_evaluate(args, hw)[0] for hw in args.hardware]
        fig = figures.breakdown_figure(reports, by=args.by, top=args.top, title=args.title)
        what = f"time breakdown by {args.by} of {len(reports)} report(s)"
    elif args.kind == "serving":
        from nodeperf.files import check_regular_file

        for f in args.results:
            check_regular_file(f, what="a per-request CSV written by `nodeperf serve --csv`", error=PlotArgError)
        runs = [(Path(f).name, read_results(f)) for f in args.results]
        fig = figures.serving_figure(runs, title=args.title)
        what = f"serving latency of {len(runs)} run(s)"
    elif args.kind == "pareto":
        df = _selected(args)
        fig = figures.pareto_figure(df, args.x, args.y, hue=args.hue, front=args.front,
                                    minimize=(not args.max_x, not args.max_y), logx=args.logx, logy=args.logy,
                                    title=args.title)
        what = f"Pareto front of {len(df)} rows"
    else:
        df = _selected(args)
        fig = figures.heatmap_figure(df, args.x, args.y, args.value, agg=args.agg, log=args.log, title=args.title)
        what = f"heatmap of {args.value} over {args.x} x {args.y} ({len(df)} rows)"
    try:
        figures.save_figure(fig, args.out)
    except OSError as exc:
        raise PlotArgError(f"plot: -o {args.out}: cannot write the file; got {exc.strerror or exc}; expected a "
                           "writable path") from None
    print(f"{what} -> {args.out}")
    return 0

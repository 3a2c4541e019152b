"""`nodeperf sweep EXPERIMENT.toml --out results.sqlite` runs a design-space sweep; `nodeperf sweep show FILE`
reads its results (filters, top rows, Pareto fronts)."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Any

from simulator.cli.common import positive_int

__all__ = ["register", "run"]

_RUN_ONLY = ("out", "scheduler", "workers", "progress", "commit_interval", "max_points", "worker_timeout")
_SHOW_ONLY = ("where", "top", "sort", "pareto", "csv")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a design-space sweep from an experiment file, or show its results",
        usage="nodeperf sweep EXPERIMENT.toml --out RESULTS.sqlite [--scheduler S] [--workers N]\n"
              "       nodeperf sweep show RESULTS.sqlite [--where EXPR] [--top K] [--sort METRIC] "
              "[--pareto M1,M2[,M3]] [--csv FILE]",
        description="Run every point of EXPERIMENT.toml (axes over workloads, hardware spec fields, options "
                    "or systolic geometry; see docs/sweep.md) into a resumable results store: SQLite by default, "
                    "Parquet for --out *.parquet. Points already in the store are not recomputed, so a killed "
                    "sweep resumes where it stopped and a changed experiment extends its store. "
                    "`nodeperf sweep show FILE` prints the stored rows: filtered with --where, the best --top K "
                    "by --sort, or the Pareto front of two or three metrics.",
    )
    p.add_argument("target", nargs="+", metavar="EXPERIMENT.toml | show FILE",
                   help="an experiment file to run, or `show` and a results store to read")
    g = p.add_argument_group("running a sweep")
    g.add_argument("--out", metavar="RESULTS.sqlite",
                   help="results store: *.sqlite (default format) or *.parquet (a folder; needs pyarrow)")
    g.add_argument("--scheduler", metavar="S",
                   help="local (default: a process pool of --workers processes on this machine, Python's "
                        "ProcessPoolExecutor, not Dask), processes (the same), threads, synchronous, or "
                        "tcp://HOST:PORT of a running Dask scheduler (for a Dask cluster on this machine, start "
                        "`dask scheduler` and `dask worker`; the scheduler and its workers must be trusted: they "
                        "exchange pickles)")
    g.add_argument("--workers", type=positive_int, metavar="N",
                   help="pool size of local/processes/threads (default: the CPUs available)")
    g.add_argument("--commit-interval", type=float, metavar="SECONDS",
                   help="seconds between commits of finished points to the store (default 1; 0: after every "
                        "task); a killed sweep loses at most this much work")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars (planning, then points) on standard error (default: only on a terminal)")
    g.add_argument("--max-points", type=positive_int, metavar="N",
                   help="refuse an experiment of more than N points before filters (default: the file's "
                        "max_points, else 1,000,000)")
    g.add_argument("--worker-timeout", type=float, metavar="SECONDS",
                   help="Dask: stop (resumable) after this long with tasks left and no worker (default 60)")
    s = p.add_argument_group("showing results (nodeperf sweep show FILE)")
    s.add_argument("--where", action="append", metavar="EXPR",
                   help="keep rows where EXPR holds, e.g. 'workload.batch >= 8 and latency_s < 0.02' (column "
                        "names, or their last part when unique; repeatable, all must hold)")
    s.add_argument("--top", type=positive_int, metavar="K", help="the K best rows by --sort (default 20)")
    s.add_argument("--sort", metavar="METRIC",
                   help="order by this column, ascending; max:NAME for descending (default: the first metric)")
    s.add_argument("--pareto", metavar="M1,M2[,M3]",
                   help="only the Pareto front of these metrics (minimised; max:NAME to maximise)")
    s.add_argument("--csv", metavar="FILE", help="write the selected rows as CSV (- for standard output)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.target[0] == "show":
        return _show(args)
    return _run(args)


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is not None]


def _run(args: argparse.Namespace) -> int:
    if len(args.target) != 1:
        raise ValueError(f"sweep: arguments; got {' '.join(args.target)!r}; expected one EXPERIMENT.toml "
                         "(or `show FILE`)")
    bad = _given(args, _SHOW_ONLY)
    if bad:
        raise ValueError(f"sweep: {bad[0]}: an option of `nodeperf sweep show`; got it with an experiment to run; "
                         f"expected `nodeperf sweep show RESULTS --{bad[0][2:]} ...`")
    if args.out is None:
        raise ValueError("sweep: --out: missing; got no results store; expected --out RESULTS.sqlite "
                         "(or RESULTS.parquet)")
    from simulator.sweep import run_sweep

    if not args.verbose:
        logging.getLogger("simulator").setLevel(logging.ERROR)
    from simulator.sweep.execute import COMMIT_INTERVAL_S, DASK_WORKER_TIMEOUT_S

    interval = COMMIT_INTERVAL_S if args.commit_interval is None else args.commit_interval
    wait = DASK_WORKER_TIMEOUT_S if args.worker_timeout is None else args.worker_timeout
    try:
        summary = run_sweep(args.target[0], args.out, scheduler=args.scheduler or "local", workers=args.workers,
                            progress=args.progress, commit_interval_s=interval, max_points=args.max_points,
                            worker_timeout_s=wait)
    except KeyboardInterrupt as exc:
        msg = getattr(exc, "message", None) or ("sweep interrupted before it started; nothing was written to "
                                                 f"{args.out}")
        print(f"nodeperf: {msg}", file=sys.stderr)
        return 130
    print(summary.line())
    return 0


def _show(args: argparse.Namespace) -> int:
    if len(args.target) != 2:
        raise ValueError(f"sweep show: arguments; got {' '.join(args.target[1:]) or 'none'!r}; expected one "
                         "results store (nodeperf sweep show RESULTS.sqlite)")
    bad = _given(args, _RUN_ONLY)
    if bad:
        raise ValueError(f"sweep show: {bad[0]}: an option of running a sweep; got it with show; expected "
                         "--where, --top, --sort, --pareto or --csv")
    try:
        import pandas  # noqa: F401
    except ImportError:
        raise ValueError("sweep show: needs pandas; got no pandas module; install it with: "
                         "pip install 'nodeperf[pandas]'") from None
    from simulator.cli.output import check_outputs, to_stdout, write_output
    from simulator.sweep import load_results, pareto_front
    from simulator.sweep.pareto import parse_metric
    from simulator.sweep.store import store_kind_of

    check_outputs(("--csv", args.csv))
    path = args.target[1]
    meta = store_kind_of(path)
    df = load_results(path)
    cols = meta.get("columns", {})
    axes = [c for c, v in cols.items() if v["role"] == "axis"]
    metrics = [c for c, v in cols.items() if v["role"] == "metric"]
    known = axes + metrics + ["error", "experiment"]
    n_all = len(df)
    df = where_rows(df, args.where or [], known, "sweep show")
    title = ""
    if args.pareto is not None:
        try:
            df = pareto_front(df, [m.strip() for m in args.pareto.split(",") if m.strip()])
        except ValueError as exc:
            raise ValueError(f"sweep show: --pareto: {exc}") from None
        title = f"Pareto front of {args.pareto}: "
    sort = args.sort or (metrics[0] if metrics else None)
    if sort is not None and args.pareto is None:
        try:
            name, sign = parse_metric(sort, [str(c) for c in df.columns])
        except ValueError as exc:
            raise ValueError(f"sweep show: --sort: {exc}") from None
        df = df.sort_values(name, ascending=sign > 0, kind="stable", na_position="last")
    top = args.top or (None if args.pareto is not None else 20)
    shown = df.head(top) if top else df
    if args.csv is not None:
        write_output("--csv", args.csv, shown.to_csv(index=False))
        if to_stdout(args.csv):
            return 0
    errors = int(df["error"].notna().sum()) if "error" in df.columns else 0
    print(f"{path}: {n_all} rows ({meta.get('kind')} points; experiments: {', '.join(meta.get('experiments', []))}); "
          f"{title}{len(df)} selected{f', {errors} with errors' if errors else ''}; showing {len(shown)}")
    if len(shown):
        print()
        print(_table(shown, axes, metrics))
    return 0


def where_rows(df: Any, exprs: list[str], known: list[str], where: str) -> Any:
    """The rows of ``df`` that every ``--where`` expression accepts, each run through the bounded
    evaluator of experiment filters (:func:`simulator.sweep.experiment.filter_function`) over the
    columns ``known`` (NaN read as None; ``latency_s < 1`` leaves out a row without a latency, the row of a
    failed point, instead of failing on it). A bad expression, or one that fails on a row, raises a
    ValueError located as ``{where}: --where: ...``."""
    from simulator.sweep.experiment import filter_function
    from simulator.sweep.filters import FilterError

    for expr in exprs:
        try:
            accept = filter_function(expr, known, missing_unordered=True)  # a failed point's empty metrics
        except ValueError as exc:
            raise ValueError(f"{where}: --where: {exc}") from None
        records = df[known].to_dict("records")
        try:
            mask = [accept({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
                    for r in records]
        except FilterError as exc:  # a bound met on a row's values (a result too large, a string too long)
            raise ValueError(f"{where}: --where: {exc}") from None
        except TypeError as exc:
            raise ValueError(f"{where}: --where: cannot evaluate {expr!r} on every row ({exc}); expected "
                             "comparisons of like values") from None
        df = df[mask]
    return df


def _short_names(cols: list[str]) -> list[str]:
    out = []
    for c in cols:
        parts = c.split(".")
        name = parts[-1]
        k = 1
        while sum(1 for o in cols if o.split(".")[-k:] == parts[-k:]) > 1 and k < len(parts):
            k += 1
            name = ".".join(parts[-k:])
        out.append(name)
    return out


#: Column-name endings and the unit of the column, most specific first: (suffix, unit, kept in the name).
_UNIT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_bytes_per_s", "B/s"), ("_flops_per_s", "FLOP/s"), ("_flop_per_s", "FLOP/s"), ("_per_s", "1/s"),
    ("_bytes", "B"), ("_hz", "Hz"), ("_s", "s"), ("_j", "J"), ("_w", "W"),
)

#: Display scales per unit, largest first: (factor of the SI value, prefix or unit shown in the header).
_SCALES: dict[str, tuple[tuple[float, str], ...]] = {
    "B/s": ((1e15, "PB/s"), (1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")),
    "FLOP/s": ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1.0, "FLOP/s")),
    "1/s": ((1e9, "G/s"), (1e6, "M/s"), (1e3, "k/s"), (1.0, "/s")),
    "B": ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")),
    "Hz": ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz"), (1.0, "Hz")),
    "s": ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")),
    "J": ((1e6, "MJ"), (1e3, "kJ"), (1.0, "J"), (1e-3, "mJ"), (1e-6, "uJ"), (1e-9, "nJ")),
    "W": ((1e6, "MW"), (1e3, "kW"), (1.0, "W"), (1e-3, "mW")),
}


def column_unit(name: str) -> tuple[str, str | None]:
    """The quantity a result column holds and its SI unit, from the column's name (``latency_s`` ->
    ``("latency", "s")``, ``memory.hbm.read_bandwidth_bytes_per_s`` -> ``("memory.hbm.read_bandwidth", "B/s")``);
    ``(name, None)`` for a column of no known unit (counts, fractions, choices)."""
    low = name.lower()
    for suffix, unit in _UNIT_SUFFIXES:
        if low.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], unit
    head, dot, last = name.rpartition(".")
    if dot:  # a per-dtype entry: compute.tensor_flops_per_s.bf16 -> ("compute.tensor.bf16", "FLOP/s")
        base, unit = column_unit(head)
        if unit is not None:
            return f"{base}.{last}", unit
    return name, None


def column_scale(unit: str, values: list[float]) -> tuple[float, str]:
    """The display scale of a column: the largest of the unit's scales that the column's largest finite
    magnitude reaches (``B/s`` with 8e12 at most -> ``(1e12, "TB/s")``); the unit itself for no values."""
    scales = _SCALES[unit]
    mags = [abs(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v != 0]
    if not mags:
        return next((f, label) for f, label in scales if f == 1.0)
    top = max(mags)
    for f, label in scales:
        if top >= f * 0.9995:
            return f, label
    return scales[-1]


def _cell(v: Any, scale: float = 1.0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if scale != 1.0 and isinstance(v, (int, float)):
        return f"{v / scale:.4g}"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e12 else f"{v:.4g}"
    return str(v)


def _table(df: Any, axes: list[str], metrics: list[str]) -> str:
    """The rows in human units: each column with a unit known from its name is scaled to one readable
    unit, named in its header (``latency_s`` -> ``latency (ms)``); the others print as stored."""
    cols = axes + metrics
    show_err = df["error"].notna().any()
    if show_err:
        cols = cols + ["error"]
    head = []
    scales = []
    for col, short in zip(cols, _short_names(cols), strict=True):
        if "." not in short and column_unit(short)[1] is None and column_unit(col)[1] is not None:
            short = ".".join(col.split(".")[-2:])  # bf16 alone names no unit: tensor_flops_per_s.bf16 does
        base, unit = column_unit(short)
        if unit is None or col == "error":
            head.append(short)
            scales.append(1.0)
            continue
        f, label = column_scale(unit, df[col].tolist())
        head.append(f"{base} ({label})")
        scales.append(f)
    body = [[_cell(v, f) for v, f in zip(row, scales, strict=True)]
            for row in df[cols].itertuples(index=False, name=None)]
    if show_err:
        body = [r[:-1] + [r[-1][:60]] for r in body]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(line.rstrip() for line in lines)

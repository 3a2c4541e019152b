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
    from simulator.sweep.experiment import filter_function
    from simulator.sweep.filters import FilterError
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
    for expr in args.where or []:
        try:
            accept = filter_function(expr, known)
        except ValueError as exc:
            raise ValueError(f"sweep show: --where: {exc}") from None
        records = df[known].to_dict("records")
        try:
            mask = [accept({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
                    for r in records]
        except FilterError as exc:  # a bound met on a row's values (a result too large, a string too long)
            raise ValueError(f"sweep show: --where: {exc}") from None
        except TypeError as exc:
            raise ValueError(f"sweep show: --where: cannot evaluate {expr!r} on every row ({exc}); expected "
                             "comparisons of like values") from None
        df = df[mask]
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


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e12 else f"{v:.4g}"
    return str(v)


def _table(df: Any, axes: list[str], metrics: list[str]) -> str:
    cols = axes + metrics
    show_err = df["error"].notna().any()
    if show_err:
        cols = cols + ["error"]
    head = _short_names(cols)
    body = [[_cell(v) for v in row] for row in df[cols].itertuples(index=False, name=None)]
    if show_err:
        body = [r[:-1] + [r[-1][:60]] for r in body]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(line.rstrip() for line in lines)


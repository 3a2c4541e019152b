"""Planning speed of `nodeperf sweep`, serial versus parallel, measured side by side in one run.

Planning lists an experiment's points, builds and digests each distinct workload's graph to key them,
and cuts the points into tasks (:func:`simulator.sweep.execute.plan_sweep`). With workload axes the
graphs dominate; with hardware axes only, the keys do. For the experiment (default
``benchmarks/sweep_planning.toml``: 6,144 points with workload axes, 1,536 distinct graphs) it prints
points/s of

* serial planning (this process, one graph after another);
* planning on the local process pool of ``--workers`` processes, as :func:`run_sweep` does, nothing
  cached (the same plan: checked);
* (``--dask``) planning on a local Dask cluster of ``--workers`` single-threaded workers;
* re-planning with every graph digest cached in a store (what re-running a finished store costs).

Usage: ``python benchmarks/bench_sweep_plan.py [--workers N] [--dask] [EXPERIMENT.toml]``. Figures
depend on the machine and its load (a shared machine: take the best of several runs); the ratio of
the parallel to the serial rate is measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from simulator.sweep.execute import _Executor, _Planner, plan_sweep
from simulator.sweep.experiment import load_experiment
from simulator.sweep.store import open_store

EXPERIMENT = Path(__file__).resolve().parent / "sweep_planning.toml"


def _clear_graph_caches() -> None:
    """Forget the graphs this process built (a fair start for the next way of planning)."""
    from simulator.sweep import execute

    execute._graph.cache_clear()


def _timed(label: str, fn: Any, serial_rate: float | None = None, repeat: int = 1) -> tuple[float, Any]:
    """Plan ``repeat`` times, print the best time and rate (and the ratio to the serial rate)."""
    dt = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        plan = fn()
        dt = min(dt, time.perf_counter() - t)
    rate = len(plan.rows) / dt
    ratio = f"  x{rate / serial_rate:5.2f} of serial" if serial_rate else ""
    print(f"{label:<38} {dt:8.2f} s  {rate:10,.0f} points/s{ratio}", flush=True)
    return rate, plan


def _same(a: Any, b: Any) -> bool:
    return list(a.rows) == list(b.rows) and a.tasks == b.tasks and a.errors == b.errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", nargs="?", default=str(EXPERIMENT))
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--dask", action="store_true", help="also plan on a local Dask cluster")
    args = ap.parse_args()
    exp = load_experiment(args.experiment)
    print(f"{Path(args.experiment).name}: {exp.size:,} points; {os.cpu_count()} CPUs, {args.workers} workers")
    serial_rate, ref = _timed("serial (this process)", lambda: plan_sweep(exp, progress=False))
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "plan.sqlite", exp.kind)
        cache = store.plan_cache()
        _clear_graph_caches()
        ex = _Executor("local", args.workers)
        try:
            _, plan = _timed(f"process pool ({args.workers} workers)",
                             lambda: plan_sweep(exp, _Planner(exp, ex, None, False), progress=False), serial_rate)
        finally:
            ex.close()
        assert _same(plan, ref), "the pool's plan differs from the serial plan"
        if args.dask:
            from distributed import Client, LocalCluster

            with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                client.run(_clear_graph_caches)
                ex = _Executor(cluster.scheduler_address, args.workers, client)
                _, plan = _timed(f"Dask LocalCluster ({args.workers} workers)",
                                 lambda: plan_sweep(exp, _Planner(exp, ex, None, False), progress=False),
                                 serial_rate)
            assert _same(plan, ref), "the Dask plan differs from the serial plan"
        ex = _Executor("local", args.workers)
        try:
            plan_sweep(exp, _Planner(exp, ex, cache, False), progress=False)  # fills the store's plan cache
        finally:
            ex.close()
        _, plan = _timed("re-planning, graphs cached (best of 3)",
                         lambda: plan_sweep(exp, _Planner(exp, _Executor("synchronous", 1), cache, False),
                                            progress=False), serial_rate, repeat=3)
        assert _same(plan, ref), "the cached plan differs from the serial plan"
        cache.close()
        store.close()


if __name__ == "__main__":
    main()

"""Planning speed of `nodeperf sweep`: a 6,144-point experiment with workload axes (1,536 distinct graphs).

Prints, for the experiment ``benchmarks/sweep_planning.toml``:

* serial planning (:func:`simulator.sweep.execute.plan_sweep` in this process, one graph after another);
* planning on the local process pool (``--workers``), as :func:`run_sweep` does, with nothing cached;
* re-planning with every graph digest cached in a store (what re-running a finished store costs).

Usage: ``python benchmarks/bench_sweep_planning.py [--workers N]``. Figures depend on the machine and
its load: take the best of several runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from simulator.sweep.execute import _Executor, _Planner, plan_sweep
from simulator.sweep.experiment import load_experiment
from simulator.sweep.store import open_store

EXPERIMENT = Path(__file__).resolve().parent / "sweep_planning.toml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--skip-serial", action="store_true")
    args = ap.parse_args()
    exp = load_experiment(EXPERIMENT)
    print(f"{EXPERIMENT.name}: {exp.size:,} points")
    if not args.skip_serial:
        t = time.perf_counter()
        plan = plan_sweep(exp)
        dt = time.perf_counter() - t
        print(f"serial planning:            {dt:7.2f} s  ({len(plan.rows) / dt:8,.0f} points/s)")
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "plan.sqlite", exp.kind)
        ex = _Executor("local", args.workers)
        cache = store.plan_cache()
        try:
            t = time.perf_counter()
            plan = plan_sweep(exp, _Planner(exp, ex, cache, progress=False))
            dt = time.perf_counter() - t
            print(f"pool planning ({args.workers} workers): {dt:7.2f} s  ({len(plan.rows) / dt:8,.0f} points/s)")
        finally:
            ex.close()
        best = float("inf")
        for _ in range(3):
            ex = _Executor("synchronous", 1)
            t = time.perf_counter()
            plan = plan_sweep(exp, _Planner(exp, ex, cache, progress=False))
            best = min(best, time.perf_counter() - t)
        cache.close()
        print(f"cached re-planning (best of 3): {best:7.3f} s  ({len(plan.rows) / best:8,.0f} points/s)")


if __name__ == "__main__":
    main()

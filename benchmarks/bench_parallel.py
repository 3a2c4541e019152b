"""Speed of parallel predictions: a 3D-parallel GPT-3 175B training step on 1,024 A100s (analytical and
discrete-event schedules) and a Llama-2-70B tensor-parallel decode step, in-process, medians.

Usage: ``python benchmarks/bench_parallel.py [--repeat N]``. Prints one line per case with the
median wall time and the goal it is held to (the goals are issue targets, not asserted in tests:
these machines are shared and noisy).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable


def _median(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm: catalog, zoo and import caches
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    a100s = load_hardware("dgx-a100x128")
    dgx = load_hardware("dgx-h100")
    plan3d = ParallelPlan(tp=8, pp=16, dp=8, microbatch=1, global_batch=1536, sequence_parallel=True)
    cases = [
        ("GPT-3 175B training step, 1,024 A100s (tp 8, pp 16, dp 8), analytical", 0.050,
         lambda: evaluate_plan("gpt3-175b", a100s, plan3d, train=True, seq=2048, recompute="selective")),
        ("GPT-3 175B training step, 1,024 A100s, discrete-event schedule", 5.0,
         lambda: evaluate_plan("gpt3-175b", a100s, plan3d, train=True, seq=2048, recompute="selective",
                               engine="des")),
        ("Llama-2-70B decode step, TP 8 on dgx-h100, discrete-event", 1.0,
         lambda: evaluate_plan("llama-2-70b", dgx, ParallelPlan(tp=8), phase="decode", context=4096, batch=16,
                               engine="des")),
    ]
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    for name, goal, fn in cases:
        t = _median(fn, args.repeat)
        verdict = "meets" if t <= goal else "misses"
        print(f"{name}: {t * 1e3:.1f} ms (goal <= {goal * 1e3:.0f} ms: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

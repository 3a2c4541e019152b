"""Speed of the serving simulator (``nodeperf serve``): one hour of traffic at 10 requests/s (36,000
requests; goal <= 10 s on one core) and a million requests (goal <= 5 minutes), Llama 2 7B on one
H100 SXM with vLLM's scheduler. Prints wall times (minimum of ``--repeat`` runs; each run from a cold
pricing cache, so the engine calls at the shape buckets are included) and the same runs' CPU time (the
process's, which other jobs on a shared machine move less than the wall time).

``--count-ops S`` instead counts the Python opcodes the serving simulator's own code (``simulator/serving/``)
executes in ``S`` seconds of the uniform-length traffic: a measure of the event loop's and the scheduler's work
that other jobs on the machine do not move (the engine calls at the bucket points are not counted).

Run: ``python benchmarks/bench_serve.py [--repeat N] [--skip-million] [--count-ops S]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from simulator.serving import ServeConfig, simulate_serving


def run(cfg: ServeConfig) -> tuple[float, float, dict]:
    t, c = time.perf_counter(), time.process_time()
    r = simulate_serving("llama-2-7b", "h100-sxm5-80gb", cfg)
    return time.perf_counter() - t, time.process_time() - c, r.summary


_UNIFORM = "uniform:in=100-2000,out=50-500"


def count_ops(seconds: float) -> None:
    """Print the opcodes executed in ``simulator/serving/`` by ``seconds`` of the uniform-length traffic, by
    function (the ten largest)."""
    per: Counter[str] = Counter()

    def call(frame, event, arg):
        if "simulator/serving/" not in frame.f_code.co_filename.replace("\\", "/"):
            return None
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        name = frame.f_code.co_name

        def step(frame, event, arg):
            if event == "opcode":
                per[name] += 1
            return step

        return step

    cfg = ServeConfig(arrival="poisson:qps=10", lengths=_UNIFORM, duration_s=seconds)
    sys.settrace(call)
    try:
        simulate_serving("llama-2-7b", "h100-sxm5-80gb", cfg)
    finally:
        sys.settrace(None)
    print(f"{seconds:g} s at 10 req/s (uniform lengths): {sum(per.values()):,} opcodes in simulator/serving/")
    for name, n in per.most_common(10):
        print(f"  {name}: {n:,}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-million", action="store_true")
    ap.add_argument("--count-ops", type=float, metavar="S", help="count the loop's opcodes over S s of traffic")
    args = ap.parse_args()
    if args.count_ops:
        count_ops(args.count_ops)
        return
    cases = [("1 h at 10 req/s (poisson, 512 in / 128 out)", ServeConfig(arrival="poisson:qps=10", duration_s=3600.0)),
             ("1 h at 10 req/s (poisson, uniform 100-2000 in / 50-500 out)",
              ServeConfig(arrival="poisson:qps=10", lengths=_UNIFORM, duration_s=3600.0))]
    if not args.skip_million:
        cases.append(("1,000,000 requests at 20 req/s (poisson, 512 in / 128 out)",
                      ServeConfig(arrival="poisson:qps=20", requests=1_000_000)))
    for name, cfg in cases:
        runs = [run(cfg) for _ in range(args.repeat if "1 h" in name else 1)]
        best, summary = min(r[0] for r in runs), runs[0][2]
        cpu = min(r[1] for r in runs)
        print(f"{name}: {best:.2f} s wall ({cpu:.2f} s CPU) for {summary['requests']} requests, "
              f"{summary['batch_tokens']['iterations']} "
              f"iterations, {summary['engine_calls']} engine calls; simulated {summary['makespan_s']:.0f} s "
              f"({summary['makespan_s'] / best:.0f}x real time)")


if __name__ == "__main__":
    main()

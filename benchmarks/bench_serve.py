"""Speed of the serving simulator (``nodeperf serve``): one hour of traffic at 10 requests/s (36,000
requests; goal <= 10 s on one core) and a million requests (goal <= 5 minutes), Llama 2 7B on one
H100 SXM with vLLM's scheduler. Prints wall times (minimum of ``--repeat`` runs; each run from a cold
pricing cache, so the engine calls at the shape buckets are included) and the same runs' CPU time (the
process's, which other jobs on a shared machine move less than the wall time).

Run: ``python benchmarks/bench_serve.py [--repeat N] [--skip-million]``.
"""

from __future__ import annotations

import argparse
import time

from simulator.serving import ServeConfig, simulate_serving


def run(cfg: ServeConfig) -> tuple[float, float, dict]:
    t, c = time.perf_counter(), time.process_time()
    r = simulate_serving("llama-2-7b", "h100-sxm5-80gb", cfg)
    return time.perf_counter() - t, time.process_time() - c, r.summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-million", action="store_true")
    args = ap.parse_args()
    cases = [("1 h at 10 req/s (poisson, 512 in / 128 out)", ServeConfig(arrival="poisson:qps=10", duration_s=3600.0)),
             ("1 h at 10 req/s (poisson, uniform 100-2000 in / 50-500 out)",
              ServeConfig(arrival="poisson:qps=10", lengths="uniform:in=100-2000,out=50-500", duration_s=3600.0))]
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

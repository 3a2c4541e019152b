"""Speed of the serving-precision pass and of costing quantised graphs, with the speedups the model predicts.

Usage: ``python benchmarks/bench_precision.py [--repeat N]``. Prints, as medians: the time of
``apply_precision`` on llama-2-7b and mixtral-8x7b, the time of ``evaluate`` on the 16-bit and the
int4 graph (a weight-only layer is priced for every tile shape, so its lowering takes longer), and
the predicted decode latency of each. Nothing here is asserted: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import platform

from _timing import median_time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    import workloads  # noqa: F401
    from simulator.engines.analytical import EvalOptions, evaluate
    from simulator.hardware import load_hardware
    from workloads.precision import apply_precision
    from workloads.resolve import load_workload

    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    hw = load_hardware("h100-sxm5-80gb")
    for model, kw in (("llama-2-7b", {"context": 2048}), ("mixtral-8x7b", {"context": 2048, "batch": 8})):
        g = load_workload(model, phase="decode", **kw)
        t_pass, q = median_time(lambda g=g: apply_precision(g, weight_dtype="int4", kv_dtype="fp8"), args.repeat)
        t16, r16 = median_time(lambda g=g: evaluate(g, hw, EvalOptions()), args.repeat)
        t4, r4 = median_time(lambda q=q: evaluate(q, hw, EvalOptions()), args.repeat)
        print(f"{model} decode on {hw.name}: pass {t_pass * 1e3:.1f} ms; evaluate 16-bit {t16 * 1e3:.1f} ms, "
              f"int4+fp8 KV {t4 * 1e3:.1f} ms; predicted latency {r16.totals.latency_s * 1e3:.2f} ms -> "
              f"{r4.totals.latency_s * 1e3:.2f} ms ({r16.totals.latency_s / r4.totals.latency_s:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

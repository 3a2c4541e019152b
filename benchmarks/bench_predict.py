"""Speed of the prediction engine: prints figures (no assertions; goals are in the issue).

Goals: evaluate llama-2-70b prefill 2048 on h100-sxm5-80gb <= 5 ms in-process; one GEMM (4096^3) on
10,000 hardware variants in one ``evaluate_variants`` call <= 10 ms; the GEMM component model alone on
10,000 variants that also vary the SM count (140 distinct counts, every variant's rates distinct)
<= 10 ms; whole-process `nodeperf predict` <= 0.8 s.
Figures before and after each change, with the machine, are in docs/sweep_speed.md.

Run: ``python benchmarks/bench_predict.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import subprocess
import sys
import time

import numpy as np


def _best(fn, repeat: int = 7) -> tuple[float, float]:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def main() -> None:
    logging.disable(logging.WARNING)
    from hwmodels import gpu
    from hwmodels.catalog import load_device
    from simulator import evaluate
    from workloads.resolve import load_workload

    dev = load_device("h100-sxm5-80gb")
    graph = load_workload("llama-2-70b", phase="prefill", seq=2048, batch=1)
    best, med = _best(lambda: evaluate(graph, dev), repeat=21)
    print(f"evaluate llama-2-70b prefill 2048 ({len(graph)} ops) on h100-sxm5-80gb: "
          f"best {best * 1e3:.2f} ms, median {med * 1e3:.2f} ms  (goal <= 5 ms)")

    from simulator.engines.vectorized import evaluate_variants
    from workloads.micro import build_micro

    gemm_graph = build_micro("gemm:m=4096,n=4096,k=4096")
    grid = {"memory.hbm.read_bandwidth_bytes_per_s": np.repeat(np.linspace(1.675e12, 6.7e12, 100), 100),
            "compute.tensor_flops_per_s.bf16": np.tile(np.linspace(0.5, 2.0, 100) * 989.4e12, 100)}
    best, med = _best(lambda: evaluate_variants(gemm_graph, dev, grid), repeat=11)
    print(f"evaluate_variants: gemm 4096^3 on 10,000 hardware variants (HBM bandwidth x bf16 rate, 0.5x - 2x "
          f"each): best {best * 1e3:.1f} ms, median {med * 1e3:.1f} ms  (goal <= 10 ms)")

    p = gpu.gpu_params(dev, "bf16")
    cands = gpu.tile_candidates(dev.arch)
    rng = np.random.default_rng(0)
    n = 10_000
    pv = dataclasses.replace(
        p,
        dram_bytes_per_s=rng.uniform(1e12, 8e12, n),
        matrix_flops_per_s=rng.uniform(2e14, 2e15, n),
        sms=rng.integers(60, 200, n).astype(float),
    )
    best, med = _best(lambda: gpu.gemm(4096, 4096, 4096, pv, cands))
    print(f"gemm model alone, 4096^3 for {n:,} hardware variants (SM count varied too) in one call: "
          f"best {best * 1e3:.1f} ms, "
          f"median {med * 1e3:.1f} ms  (goal <= 10 ms)")

    def cold() -> None:  # the per-group tables of the SM counts not kept from an earlier call
        gpu._GROUP_KEYS.clear()
        gpu.gemm(4096, 4096, 4096, pv, cands)

    best, med = _best(cold)
    print(f"gemm model alone, the same as a first call for these SM counts: best {best * 1e3:.1f} ms, "
          f"median {med * 1e3:.1f} ms  (goal <= 10 ms)")
    pg = dataclasses.replace(pv, sms=np.repeat([66.0, 78.0, 96.0, 108.0, 114.0, 132.0, 144.0, 160.0], n // 8))
    best, med = _best(lambda: gpu.gemm(4096, 4096, 4096, pg, cands))
    print(f"gemm model alone, the same with the SM count from 8 values (a grid): best {best * 1e3:.1f} ms, "
          f"median {med * 1e3:.1f} ms  (no goal)")
    best, med = _best(lambda: gpu.streaming(1e9, 1e9, 1e8, pv))
    print(f"streaming kernel for {n:,} variants: best {best * 1e3:.2f} ms")

    cmd = [sys.executable, "-m", "simulator.cli", "predict", "llama-2-7b", "--hardware", "h100-sxm5-80gb",
           "--phase", "decode", "--batch", "1", "--context", "2048"]
    best, med = _best(lambda: subprocess.run(cmd, check=True, capture_output=True), repeat=5)
    print(f"whole-process `nodeperf predict llama-2-7b --phase decode`: best {best:.2f} s, median {med:.2f} s  "
          "(goal <= 0.8 s)")


if __name__ == "__main__":
    main()

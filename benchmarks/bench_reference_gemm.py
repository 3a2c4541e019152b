"""Rate of PyTorch's reference GEMM loops for bf16/fp16 on a CPU without a reduced-precision library path.

PyTorch hands a bf16 (fp16) matmul on a CPU to oneDNN only when the CPU has AVX-512 BW/VL/DQ or
AVX-NE-CONVERT (AVX512-FP16 or AVX-NE-CONVERT), or the Arm BF16 extension for bf16
(``mkldnn_bf16_device_check`` / ``mkldnn_fp16_device_check``, aten/src/ATen/native/mkldnn/Utils.h);
elsewhere, on an AVX2-only x86 core for instance, it runs ATen's portable GEMM loops
(aten/src/ATen/native/cpu/BlasKernel.cpp) on one thread, tens of times below the fp32 BLAS rate.
``hwmodels.host`` prices such matmuls at ``REFERENCE_GEMM_FLOP_PER_CYCLE`` x clock; this script
measures that figure on this machine: the quick suite's bf16 GEMM shapes in bf16 and fp16, one and
all threads, printed as GFLOP/s and FLOP per cycle at the clock ``hwmodels.host`` reads.

Run: ``python benchmarks/bench_reference_gemm.py`` (about a minute on an AVX2 core; it times nothing
useful on a CPU that has the library path, and says so). ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def _time(fn, budget_s: float = 0.5, min_reps: int = 3) -> float:
    fn()
    reps, t0 = 0, time.perf_counter()
    best = float("inf")
    while reps < min_reps or time.perf_counter() - t0 < budget_s:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        reps += 1
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    from hwmodels.host import low_precision_library, read_host_info
    from simulator.calibration.harness import suite
    from workloads.micro import parse_micro

    info = read_host_info()
    library = {dt: low_precision_library(info, dt) for dt in ("bf16", "fp16")}
    shapes = []
    for case in suite("quick", networks=False):
        if case.category == "gemm" and case.dtype == "bf16":
            _, a = parse_micro(case.workload)
            shapes.append((int(a["m"]), int(a["n"]), int(a["k"])))
    rows = []
    for threads in sorted({1, info.cores}):
        torch.set_num_threads(threads)
        for dt, tdt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            for m, n, k in shapes:
                x = torch.randn(m, k, dtype=tdt)
                w = torch.randn(k, n, dtype=tdt)
                s = _time(lambda x=x, w=w: x @ w)
                rate = 2.0 * m * n * k / s
                rows.append({"threads": threads, "dtype": dt, "m": m, "n": n, "k": k, "seconds": s,
                             "gflop_per_s": rate / 1e9, "flop_per_cycle": rate / info.clock_hz})
    one = [r["flop_per_cycle"] for r in rows if r["threads"] == 1]
    out = {"cpu": info.model_name, "flags_library_path": {dt: why for dt, why in library.items()},
           "clock_hz": info.clock_hz, "torch": torch.__version__, "rows": rows,
           "median_flop_per_cycle_one_thread": statistics.median(one)}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"cpu: {info.model_name}, clock {info.clock_hz / 1e9:.4g} GHz ({info.clock_source}); torch {torch.__version__}")
    for dt, why in library.items():
        print(f"  {dt}: {why}")
    print(f"{'threads':>7}  {'dtype':>5}  {'m x n x k':>18}  {'GFLOP/s':>8}  {'FLOP/cycle':>10}")
    for r in rows:
        print(f"{r['threads']:>7}  {r['dtype']:>5}  {r['m']:>6}x{r['n']}x{r['k']:<6}  {r['gflop_per_s']:>8.3g}  "
              f"{r['flop_per_cycle']:>10.3g}")
    print(f"median FLOP/cycle, one thread: {out['median_flop_per_cycle_one_thread']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

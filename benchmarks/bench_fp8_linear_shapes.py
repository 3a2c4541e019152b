"""Time the GEMMs of torchao's tensorwise Float8Linear and of a bf16 linear at the Llama-3 training shapes of
the torchtitan fp8 rows (published_training.csv), on one NVIDIA GPU with fp8 tensor cores.

    python benchmarks/bench_fp8_linear_shapes.py [--out FILE.csv]

Per linear (forward M x K -> N) it times the three GEMMs of a training step as torchao runs them
(torchao/float8/float8_linear.py @ eab345c: ``Float8LinearConfig`` defaults ``gemm_config_output``
``use_fast_accum=True``, ``gemm_config_grad_input``/``gemm_config_grad_weight`` ``use_fast_accum=False``;
``torch._scaled_mm`` wants the first operand row-major and the second column-major) and the same three
in bf16 (``torch.mm``), operands laid out beforehand (casts and transposes are not timed). Prints one line
per GEMM: shape, bf16 and fp8 time (median of CUDA-event timings after warm-up) and TFLOP/s.
Nothing to time (torch not importable, no CUDA device or no ``torch._scaled_mm``): prints why on stderr and
exits 1, as benchmarks/bench_expert_gemm.py does.
"""

from __future__ import annotations

import argparse
import csv
import sys

#: (row group, linear, M, K, N): Llama-3-8B (hidden 4096, 32 q / 8 kv heads of 128, ffn 14336) at local batch
#: 2 x 8192 (FSDP rows) and, tensor parallel over 8, 12 x 8192 (train-045..048); Llama-3-70B (hidden 8192,
#: 64 / 8 heads, ffn 28672) tensor parallel over 8 at 16 x 8192 (train-037..042)
SHAPES = [
    ("8b-fsdp", "wq/wo", 16384, 4096, 4096), ("8b-fsdp", "wk/wv", 16384, 4096, 1024),
    ("8b-fsdp", "w1/w3", 16384, 4096, 14336), ("8b-fsdp", "w2", 16384, 14336, 4096),
    ("8b-tp8", "wq", 98304, 4096, 512), ("8b-tp8", "wk/wv", 98304, 4096, 128), ("8b-tp8", "wo", 98304, 512, 4096),
    ("8b-tp8", "w1/w3", 98304, 4096, 1792), ("8b-tp8", "w2", 98304, 1792, 4096),
    ("70b-tp8", "wq", 131072, 8192, 1024), ("70b-tp8", "wk/wv", 131072, 8192, 128),
    ("70b-tp8", "wo", 131072, 1024, 8192), ("70b-tp8", "w1/w3", 131072, 8192, 3584),
    ("70b-tp8", "w2", 131072, 3584, 8192),
]


def _time(fn, torch, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    out.sort()
    return out[len(out) // 2]


def _cases(m: int, k: int, n: int):
    """(gemm, rows, inner, cols, fast_accum) of forward, grad-input and grad-weight."""
    return [("fwd", m, k, n, True), ("dgrad", m, n, k, False), ("wgrad", n, m, k, False)]


def _pair(torch, dev, r: int, inner: int, c: int, fast: bool) -> tuple[float, float]:
    """(bf16, fp8) seconds of one (r x inner) @ (inner x c) GEMM, the second operand column-major."""
    one = torch.ones((), device=dev)
    a = torch.randn(r, inner, device=dev, dtype=torch.bfloat16)
    b = torch.randn(c, inner, device=dev, dtype=torch.bfloat16)  # (cols, inner) row-major = B column-major
    t16 = _time(lambda: torch.mm(a, b.t()), torch)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    t8 = _time(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast), torch)
    return t16, t8


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not importable: nothing to time", file=sys.stderr)
        return 1
    if not torch.cuda.is_available() or not hasattr(torch, "_scaled_mm"):
        print("no CUDA device or no torch._scaled_mm: nothing to time", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(0)} torch {torch.__version__} cuda {torch.version.cuda}")
    rows = []
    for group, name, m, k, n in SHAPES:
        for gemm, r, inner, c, fast in _cases(m, k, n):
            t16, t8 = _pair(torch, dev, r, inner, c, fast)
            flops = 2.0 * r * inner * c
            rows.append((group, name, gemm, r, inner, c, int(fast), t16, t8, flops / t16 / 1e12, flops / t8 / 1e12))
            print(f"{group:8s} {name:6s} {gemm:5s} {r:6d}x{inner:6d}x{c:6d} fast={int(fast)} bf16 {t16 * 1e6:9.1f} us "
                  f"{flops / t16 / 1e12:6.1f} TF/s  fp8 {t8 * 1e6:9.1f} us {flops / t8 / 1e12:6.1f} TF/s  "
                  f"speedup {t16 / t8:5.2f}", flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["group", "linear", "gemm", "m", "k", "n", "fast_accum", "bf16_s", "fp8_s", "bf16_tflops",
                        "fp8_tflops"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

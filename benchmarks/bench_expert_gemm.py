"""GPU time of MoE expert GEMMs run one cuBLASLt GEMM per local expert on 4 streams, beside the model's price.

Transformer Engine's ``GroupedLinear`` (the experts of Megatron-Core's ``TEGroupedMLP``) runs one cuBLASLt GEMM per
local expert, expert ``i`` on compute stream ``i % 4`` (``multi_stream_cublas_gemm``, common/gemm/cublaslt_gemm.cu @
release_v2.9). This script times the same pattern with PyTorch (``torch.mm`` in bf16, ``torch._scaled_mm`` with
per-tensor scales in fp8 e4m3, both cuBLASLt) at the expert shapes of Qwen3-30B-A3B (d 2,048, expert width 768,
fc1 2 x 768): the forward of fc1 and fc2, their input gradients and their weight gradients, for the rows per expert
the Megatron-Bridge rows run (EP ranks x tokens per rank x top-8 / 128 experts: 2,048 to 8,192) and below. The
loop is captured in a CUDA graph and replayed, so the figure is GPU time without the host's issue cost (an eager
PyTorch loop of these GEMMs is bound by the host on a small VM: about 26 us a GEMM with the stream switches). The
model's price (``simulator.lowering.gpu``: rounds of 4 concurrent GEMMs, ``_gemm_cost`` with the per-expert rule)
is printed beside each figure when ``--hardware`` names a catalog device.

Run on a CUDA GPU: ``python benchmarks/bench_expert_gemm.py --hardware h100-sxm5-80gb`` (about 10 s of GPU time).
Nothing to time (torch not importable or no CUDA device): prints why on stderr and exits 1, as
benchmarks/bench_fp8_linear_shapes.py does.
The figures of one H100 SXM run are in hwmodels/measurements/h100_expert_gemms.csv (read by
tests/simulator/lowering/test_expert_gemm_h100.py) and docs/accuracy.md ("MoE rows: ... expert GEMMs measured on an
H100 ...", "H100 fp8 GEMMs without fast accumulation"). ``torch._scaled_mm`` runs without fast accumulation by
default, so the model's fp8 price includes the FP32 promotions (``simulator.lowering.gpu.fp8_promotion``).
"""

from __future__ import annotations

import argparse
import sys

#: (name, m, n, k) of one expert's GEMM for ``rows`` routed rows, Qwen3-30B-A3B (d 2,048, fc1 1,536, fc2 in 768)
SHAPES = (("fc1", "rows", 1536, 2048), ("fc2", "rows", 2048, 768), ("fc1.bwd_data", "rows", 2048, 1536),
          ("fc2.bwd_data", "rows", 768, 2048), ("fc1.bwd_weight", 1536, 2048, "rows"),
          ("fc2.bwd_weight", 2048, 768, "rows"))
#: (local experts, rows per expert) measured
CASES = ((16, 2048), (16, 4096), (8, 4096), (16, 8192), (16, 1024), (16, 512), (16, 256))
STREAMS = 4


def _graph_time_us(torch, fn, reps: int = 10) -> float:
    """Mean GPU time of ``fn`` captured in a CUDA graph and replayed ``reps`` times (CUDA events)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e3


def _per_expert_loop(torch, streams, lhs, rhs, gemm):
    def run():
        cur = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(cur)
        for i, (x, w) in enumerate(zip(lhs, rhs, strict=True)):
            with torch.cuda.stream(streams[i % len(streams)]):
                gemm(x, w)
        for s in streams:
            cur.wait_stream(s)
    return run


def _model_us(hardware: str, experts: int, m: int, n: int, k: int, dtype: str) -> float:
    from simulator.engines.analytical import EvalOptions
    from simulator.hardware import load_hardware
    from simulator.lowering.common import LoweringContext
    from simulator.lowering.gpu import PER_EXPERT_RULE, _gemm_cost, fp8_promotion

    ctx = LoweringContext(load_hardware(hardware), EvalOptions())
    width = min(STREAMS, experts)
    fp8 = dtype.startswith("fp8")
    one = _gemm_cost(ctx, m, n, k, batch=width, dtype=dtype, in_bytes=1 if fp8 else 2,
                     out_bytes=2, b_shared=False, rule=PER_EXPERT_RULE)
    promo_s = fp8_promotion(ctx, width, m, n, k)[0] if fp8 else 0.0  # use_fast_accum=False
    busy = max(one.compute_s, one.memory_s)
    return (float(one.device_time_s) - busy + max(one.compute_s + promo_s, one.memory_s)) * (experts // width) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="", help="catalog device whose model price to print beside each figure")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not importable: nothing to time", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time", file=sys.stderr)
        return 1
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    try:  # the SM clock now (NVML through torch; needs pynvml): recorded with the figures
        print(f"# SM clock {torch.cuda.clock_rate()} MHz at start")
    except Exception as exc:  # noqa: BLE001 - a missing pynvml only loses this line
        print(f"# SM clock not read: {exc}")
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    scale = torch.ones((), device="cuda")
    fp8 = getattr(torch, "float8_e4m3fn", None)
    for experts, rows in CASES:
        for name, *mnk in SHAPES:
            m, n, k = (rows if v == "rows" else v for v in mnk)
            lhs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(experts)]
            rhs = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(experts)]
            line = f"E{experts} rows {rows} {name} {m}x{n}x{k}:"
            for dtype in ("bf16", "fp8_e4m3"):
                if dtype == "bf16":
                    t = _graph_time_us(torch, _per_expert_loop(torch, streams, lhs, rhs, lambda x, w: torch.mm(x, w.t())))
                elif fp8 is None:
                    continue
                else:
                    a8, b8 = [x.to(fp8) for x in lhs], [x.to(fp8) for x in rhs]
                    t = _graph_time_us(torch, _per_expert_loop(torch, streams, a8, b8, lambda x, w: torch._scaled_mm(
                        x, w.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)))
                tflops = 2.0 * m * n * k * experts / t / 1e6
                line += f" {dtype} {t:.1f} us ({tflops:.0f} TFLOP/s)"
                if args.hardware:
                    line += f" model {_model_us(args.hardware, experts, m, n, k, dtype):.1f} us;"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A fused-attention backward is three kernels (five with grouped KV heads), as FlashAttention launches it."""

from __future__ import annotations

import pytest

import nodeperf as npf
from hwmodels import gpu
from workloads.resolve import load_workload


@pytest.mark.parametrize(("model", "kernels"), [("gpt2", 3), ("llama-3-8b", 5)])
def test_training_graph_attention_backward_launches_its_passes(model: str, kernels: int) -> None:
    # gpt2: 12 heads on 12 KV heads (preprocess, main, postprocess); Llama-3-8B: 32 query heads on 8 KV
    # heads, so dK and dV take one more kernel each
    hw = npf.load_hardware("h100-sxm5-80gb")
    report = npf.evaluate(load_workload(model, batch=1, seq=256, train=True), hw)
    bwd = [r for r in report.records if r.kind == "attention_bwd"]
    fwd = [r for r in report.records if r.kind == "attention"]
    assert bwd and all(r.kernels == kernels for r in bwd)
    assert all(r.kernels == 1 for r in fwd)
    # at this size every kernel is shorter than the host's launch time: the op costs one launch each
    assert bwd[0].time_s == pytest.approx(kernels * hw.efficiency.launch_overhead_s)


def test_backward_passes_lengthen_a_long_backward_by_their_streaming_time():
    p = gpu.gpu_params(npf.load_hardware("b200"), "fp16")
    e = gpu.attention(32, 32, 32, 512, 512, 64, 64, p, backward=True)
    passes, n = gpu.attention_bwd_passes(32, 32, 32, 512, 512, 64, 64, p)
    rows = 32 * 32 * 512
    # preprocess reads O and dO (2 B) and writes the fp32 accumulator and row sums; postprocess
    # reads the accumulator and writes dQ
    assert passes.dram_bytes == pytest.approx(2 * rows * 64 * 2 + rows * 64 * 4 + rows * 4 + rows * 64 * 4 + rows * 64 * 2)
    assert n == 2
    assert e.time_s - passes.time_s == pytest.approx(max(e.compute_s, e.memory_s) + p.dram_latency_s)

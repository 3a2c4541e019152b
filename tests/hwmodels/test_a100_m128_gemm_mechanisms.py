"""The A100's 128-row GEMMs: the premises docs/accuracy.md ("A100 GEMMs at M = 128: which mechanism, checked
against sources") sizes three candidate mechanisms on.

The TensorRT-LLM first-token rows at 128 tokens run the tactic timed at 65536 tokens; the model takes it as one
128 x 128 x 32, 5-stage CTA per output tile with no split-K, and prices the attention output's GEMM by the busiest
SM's math (worked by hand below). A per-SM DRAM pull bound (Little's law with the loaded latency of
RRZE-HPC/gpu-benches @ 1038c5d ``gpu-stream/a100_80.txt``) leaves that tile far above what the measured M = 128
kernels need, which is why no such cost was added.
"""

from __future__ import annotations

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device

SMS = 108
TENSOR_PEAK = 312e12  # A100 dense fp16/bf16 tensor rate, FLOP/s (catalog)
TENSOR_FRACTION = 0.869  # efficiency.tensor_peak_fraction (catalog defaults/efficiency.toml), as gpu_params reads it


@pytest.fixture(scope="module")
def params() -> gpu.GpuParams:
    return gpu.gpu_params(load_device("a100-sxm4-80gb"), "fp16")


def test_catalog_rates_the_hand_computation_uses(params):
    assert float(params.sms) == SMS
    assert float(params.matrix_flops_per_s) == TENSOR_PEAK
    assert float(params.matrix_fraction) == pytest.approx(TENSOR_FRACTION)


def test_65536_token_tactic_runs_one_cta_per_tile_at_128_tokens(params):
    cands = gpu.tile_candidates("ampere")
    tactic = gpu.gemm(65536, 4096, 4096, params, cands)
    assert str(tactic.tile) == "128x128x32_s5" and int(tactic.split_k) == 1
    tile = tuple(c for c in cands if c.name == "128x128x32_s5")
    e = gpu.gemm(128, 4096, 4096, params, tile, split_k=(1,))
    assert int(e.ctas) == 32 and e.bound_term == "main-loop"
    # one CTA's tile on one SM: 2 x 128 x 128 x 4096 FLOP at 312 TFLOP/s x 0.869 / 108 SMs = 53.46 us
    hand = 2 * 128 * 128 * 4096 / (TENSOR_PEAK * TENSOR_FRACTION / SMS)
    assert hand == pytest.approx(53.46e-6, rel=1e-3)
    assert float(e.compute_s) == pytest.approx(hand, rel=1e-9)


def test_littles_law_does_not_bind_the_5_stage_tile():
    # gpu-stream/a100_80.txt, row "128 27648 2 12.5%": triad 993 GB/s with 256 threads per SM, 3 x 8 B loads each
    in_flight = 256 * 3 * 8
    latency_s = in_flight / (993e9 / SMS)
    assert latency_s == pytest.approx(668e-9, rel=1e-3)
    tile = next(c for c in gpu.tile_candidates("ampere") if c.name == "128x128x32_s5")
    weight_in_flight = (tile.stages - 1) * tile.tile_k * tile.tile_n * 2
    assert weight_in_flight == 32 * 1024
    pull = weight_in_flight / latency_s  # bytes/s one SM can pull at that latency: 49 GB/s
    # gemmk-132 (128 x 12288 x 4096, 80.79 us measured) as 96 CTAs of 128 x 128: 1 MiB of weight each
    need = 4096 * 128 * 2 / 80.79e-6
    assert pull == pytest.approx(49.05e9, rel=1e-3) and need == pytest.approx(12.98e9, rel=1e-3)
    assert pull > 3 * need

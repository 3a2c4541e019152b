"""The A100's 128-row GEMMs: the premises docs/accuracy.md ("A100 GEMMs at M = 128: which mechanism, checked
against sources") sizes three candidate mechanisms on.

The TensorRT-LLM first-token rows at 128 tokens run the tactic timed at 65536 tokens; the model takes it as one
128 x 128 x 32, 5-stage CTA per output tile with no split-K, and prices the attention output's GEMM by the busiest
SM's math (worked by hand below). A per-SM DRAM pull bound (Little's law with the loaded latency of
RRZE-HPC/gpu-benches @ 1038c5d ``gpu-stream/a100_80.txt``) leaves that tile far above what the measured M = 128
kernels need, which is why no such cost was added. The last tests pin the warps each row's GEMM holds on its busiest SM
(four or eight, one or two CTAs) and the independent mma.sync its warp tile issues per k16 step, the premises of
"The mma.sync rate by warps in flight" in the same document.
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


# --- warps in flight per SM (docs/accuracy.md, "The mma.sync rate by warps in flight") ---------------------------

# (GEMM, tile the model prices under the 400 W limit, split-K, CTAs, math warps on the busiest SM): the kernels
# table's M = 128 rows gemmk-131..135
KERNEL_ROWS = [
    ("gemm:m=128,n=4096,k=4096", "128x64x32_s6", 3, 192, 8),
    ("gemm:m=128,n=12288,k=4096", "128x128x32_s5", 1, 96, 4),
    ("gemm:m=128,n=16384,k=4096", "128x64x32_s6", 2, 512, 8),
    ("gemm:m=128,n=4096,k=16384", "128x128x32_s5", 3, 96, 4),
    ("gemm:m=128,n=8192,k=8192", "128x128x32_s5", 3, 192, 8),
]


def _math_warps_on_busiest_sm(tile: gpu.TileCandidate, ctas: int, ctas_per_sm: float) -> int:
    busiest = -(-ctas // SMS)  # CTAs the busiest SM runs
    resident = min(int(ctas_per_sm), busiest)
    return resident * (tile.threads - tile.producer_threads) // 32


@pytest.mark.parametrize("workload, tile_name, split, ctas, warps", KERNEL_ROWS)
def test_kernel_rows_hold_four_or_eight_math_warps_per_sm(workload, tile_name, split, ctas, warps):
    from simulator.engines.analytical import EvalOptions, evaluate
    from workloads.resolve import load_workload

    dev = load_device("a100-sxm4-80gb")
    (rec,) = [r for r in evaluate(load_workload(workload, dtype="bf16"), dev, EvalOptions()).records if r.kind == "matmul"]
    assert (rec.tile, int(rec.split_k), int(rec.ctas)) == (tile_name, split, ctas)
    tile = next(c for c in gpu.tile_candidates("ampere") if c.name == tile_name)
    assert _math_warps_on_busiest_sm(tile, int(rec.ctas), float(rec.ctas_per_sm)) == warps


def test_warp_tiles_issue_16_or_32_independent_mma_per_k16_step(params):
    # m16n8k16: a warp tile of wm x wn accumulates (wm / 16) x (wn / 8) disjoint m16n8 blocks
    by_name = {c.name: c for c in gpu.tile_candidates("ampere")}
    for name, independent in (("128x128x32_s5", 32), ("128x64x32_s6", 16)):
        t = by_name[name]
        wm, wn = t.tile_m // t.warps_m, t.tile_n // t.warps_n
        assert (t.threads // 32, (wm // 16) * (wn // 8)) == (4, independent)
    # one m16n8k16 (4096 FLOP) holds a sub-partition's tensor core (a quarter of the SM's rate at 1.41 GHz) 8 clocks,
    # so a 64 x 64 warp tile's k16 step is 256 tensor clocks of independent work, the benchmark's ILP 5 only 40
    clock_hz = load_device("a100-sxm4-80gb").clock.boost_hz
    per_subpartition_flop_per_clk = float(params.matrix_flops_per_s) / (SMS * clock_hz) / 4
    assert 4096 / per_subpartition_flop_per_clk == pytest.approx(8.0, rel=1e-3)


def test_tensorrt_llm_128_token_gemms_run_one_four_warp_cta_per_sm(params):
    tile = next(c for c in gpu.tile_candidates("ampere") if c.name == "128x128x32_s5")
    for n, k, ctas in ((12288, 4096, 96), (4096, 4096, 32), (11008, 4096, 86), (4096, 11008, 32)):
        e = gpu.gemm(128, n, k, params, (tile,), split_k=(1,))
        assert int(e.ctas) == ctas
        assert _math_warps_on_busiest_sm(tile, int(e.ctas), float(e.ctas_per_sm)) == 4

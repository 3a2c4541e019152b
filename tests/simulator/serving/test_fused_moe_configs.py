"""vLLM 0.6's Triton fused-MoE kernel without a tuned config: ``get_default_config``'s tile on a device the wheel
ships no config for (the H200 for Mixtral at TP 2), the tuned kernel (the model's tile search) where it ships one."""

from __future__ import annotations

import pytest

from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.frameworks import FUSED_MOE_DEFAULT_TILES, fused_moe_default_tile, get_profile
from workloads.parallel import ParallelPlan

_V0 = get_profile("vllm-v0").fused_moe_configs


def _expert_tiles(system: str, batch: int, configs: tuple = _V0) -> set[str]:
    """Tiles of the expert GEMMs of one Mixtral 8x7B decode step at TP 2 (each rank: 8 experts, N = 14336 / 2)."""
    res = evaluate_plan("mixtral-8x7b", load_hardware(system), ParallelPlan(tp=2),
                        EvalOptions(fusion=True, cuda_graphs=True, fused_moe_configs=configs),
                        phase="decode", context=256, batch=batch)
    return {r.tile for rep in res.reports for r in rep.records if r.name.split(".")[-1] in ("experts_in", "experts_out")
            and r.tile}


def test_the_vllm_06_wheel_ships_mixtral_tp2_configs_for_a100_and_h100_not_h200() -> None:
    """configs/E=8,N=7168,device_name=NVIDIA_A100-SXM4-80GB.json and ..._H100_80GB_HBM3.json are in the
    vllm==0.6.1 wheel; no file names the H200."""
    assert (8, 7168, "a100-sxm4-80gb") in _V0 and (8, 7168, "h100-sxm5-80gb") in _V0
    assert not any(dev.startswith("h200") for _, _, dev in _V0)
    assert not get_profile("vllm").fused_moe_configs and not get_profile("sglang-0.3").fused_moe_configs


def test_the_default_config_tile_follows_tokens_against_experts() -> None:
    assert fused_moe_default_tile(8, 8) == FUSED_MOE_DEFAULT_TILES["small"] == (16, 32, 64)
    assert fused_moe_default_tile(9, 8) == FUSED_MOE_DEFAULT_TILES["large"] == (64, 64, 32)


@pytest.mark.parametrize(("batch", "tile"), [(200, "64x64x32_s3"), (4, "16x32x64_s3")])
def test_h200_runs_the_default_tile_with_tritons_three_stages(batch: int, tile: str) -> None:
    assert _expert_tiles("hgx-h200", batch) == {tile}


def test_h100_runs_its_tuned_kernel_and_no_configs_means_the_search_everywhere() -> None:
    tuned = _expert_tiles("dgx-h100", 200)
    assert tuned and not tuned & {"64x64x32_s3", "16x32x64_s3"}
    assert _expert_tiles("hgx-h200", 200, ()) and not _expert_tiles("hgx-h200", 200, ()) & {"64x64x32_s3"}


def test_the_fused_moe_facts_move_no_sweep_key_and_no_graph_digest() -> None:
    """A default-options sweep identity and Mixtral's decode graph digests are those of the model before the
    fused-MoE configs were priced: the configs' default is left out of the key, and the M and N the kernel needs
    are read from the graph's ops by the engine (workloads.frameworks.fused_moe_steps), not added to the graph."""
    from simulator.engines.analytical import graph_digest
    from simulator.parallel.compose import stage_graphs
    from simulator.sweep.execute import _options_identity

    assert _options_identity({}) == {
        "allow_tf32": False, "attention_kernel": "auto", "cuda_graphs": False, "eager_framework": False,
        "embedding_onehot": False, "engine": "analytical", "fusion": None, "l2_residency": True, "plan": None,
        "power_cap": True, "splash_blocks": (), "splash_fused_bwd": False, "streams": None}
    digests = [graph_digest(stage_graphs("mixtral-8x7b", plan, phase="decode", context=256, batch=4)[0].graph)
               for plan in (ParallelPlan(), ParallelPlan(tp=2))]
    assert digests == ["29af4d2888c0ad06a3b66960a773119e14b4babb3599994bb87e1a13e1d3ef7f",
                       "19f59f227ed0d1c8c70c69804915573141b4a318b9994c2d57e72fd188b5753a"]

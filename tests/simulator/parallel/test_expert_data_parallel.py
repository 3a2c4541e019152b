"""MoE experts' gradients, parameters and optimizer state over the expert-data-parallel group (the ranks holding
the same experts: Megatron-Core's ``tp x cp x dp / (ep x etp)``, NeMo AutoModel's ``ep_shard``), NeMo AutoModel's
bf16 parameters and Adam moments, its experts left out of FSDP at ``ep_shard`` 1, and DeepEP's measured internode
rate (deepseek-ai/DeepEP docs/legacy.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from simulator.hardware import load_hardware
from simulator.lowering.collectives import _deepep_measured_rate, collective_system_for
from simulator.parallel import training_validation as tv
from simulator.parallel.compose import _expert_sharded, _sharded_states, expert_dp_size
from workloads.parallel import ParallelPlan

#: one layer of 100 bytes of bf16 weights (50 parameters), 80 of them experts'; bf16 gradients; an fp32 master
#: copy (200 bytes) and fp32 Adam moments (400 bytes) as the graph states them
STATES = (100.0, 100.0, 600.0)
UNITS = {"layers.0": 100.0}
EX_UNITS = {"layers.0": 80.0}


def test_expert_data_parallel_group_sizes() -> None:
    assert expert_dp_size(ParallelPlan(dp=64, ep=8), 64) == 8  # Megatron-Core: dp / ep
    # etp 1 folds the tensor-parallel ranks into the expert layer: tp x dp / (ep x etp) = 2 x 16 / 32
    assert expert_dp_size(ParallelPlan(tp=2, dp=16, ep=32, etp=1, sequence_parallel=True), 16) == 1
    assert expert_dp_size(ParallelPlan(tp=2, dp=16, ep=4), 16) == 4  # etp = tp: dp / ep
    assert expert_dp_size(ParallelPlan(pp=4, dp=256, ep=64, fsdp=True), 256) == 4  # AutoModel ep_shard, 1,024 GPUs
    assert expert_dp_size(ParallelPlan(pp=4, dp=64, ep=64, fsdp=True), 64) == 1  # 256 GPUs
    assert expert_dp_size(ParallelPlan(dp=8), 8) == 8  # no expert parallelism: the data-parallel group


def test_megatron_distributed_optimizer_shards_experts_over_their_group() -> None:
    plan = ParallelPlan(dp=64, ep=8, zero_stage=1)
    p, g, o, extra = _expert_sharded(plan, 64, STATES, 0.8, (2.0, True), UNITS, EX_UNITS)
    assert extra is None
    assert p == pytest.approx(100.0)  # ZeRO-1 keeps the 16-bit weights whole
    assert g == pytest.approx(200.0)  # fp32 main gradients (4 bytes x 50), not sharded at ZeRO-1
    assert o == pytest.approx(0.8 * 600 / 8 + 0.2 * 600 / 64)  # experts' state over 8 ranks, the rest over 64


def test_automodel_experts_out_of_fsdp_at_ep_shard_one() -> None:
    plan = ParallelPlan(dp=8, ep=8, fsdp=True, param_dtype="bf16")
    p, g, o, extra = _expert_sharded(plan, 8, STATES, 0.8, (2.0, True), UNITS, EX_UNITS)
    # experts (40 parameters) whole, bf16: 80 bytes of parameters and of gradients, bf16 moments (320 - 160) / 2;
    # the dense 10 parameters over 8 ranks: 20 / 8 bytes each, moments (120 - 40) / 2 / 8
    assert (p, g, o) == pytest.approx((80.0 + 2.5, 80.0 + 2.5, 160.0 + 5.0))
    assert extra is not None and extra["fsdp_reduce_scatter"] == pytest.approx(20.0 / 2 * 4)  # dense layer only
    # ep_shard 4: the experts FSDP-sharded over 4 ranks, gathered and reduced with the rest (no replacement buffers)
    p4, _, o4, extra4 = _expert_sharded(ParallelPlan(dp=32, ep=8, fsdp=True, param_dtype="bf16"), 32, STATES, 0.8,
                                        (2.0, True), UNITS, EX_UNITS)
    assert extra4 is None and p4 == pytest.approx(80.0 / 4 + 20.0 / 32) and o4 == pytest.approx(160.0 / 4 + 40.0 / 32)


def test_fsdp_bf16_parameters_hold_eight_bytes_a_parameter() -> None:
    p, g, o, _ = _sharded_states(ParallelPlan(dp=4, fsdp=True, param_dtype="bf16"), 4, 100.0, 100.0, 600.0,
                                 (2.0, True), UNITS)
    assert (p, g, o) == pytest.approx((25.0, 25.0, 50.0))  # (2 + 2 + 4) x 50 / 4
    p, g, o, _ = _sharded_states(ParallelPlan(dp=4, fsdp=True), 4, 100.0, 100.0, 600.0, (2.0, True), UNITS)
    assert (p, g, o) == pytest.approx((50.0, 50.0, 100.0))  # fp32 master parameters (torchtitan): 16 x 50 / 4


def test_automodel_rows_store_bf16_parameters() -> None:
    rows = {r.id: r for r in tv.load_training_rows()}
    assert tv._plan(rows["train-138"], 64).param_dtype == "bf16"
    assert tv._plan(rows["train-027"], 8).param_dtype == ""  # torchtitan: fp32 sharded parameters


def test_deepep_measured_internode_rate() -> None:
    h100 = collective_system_for(load_hardware("dgx-h100x8"))
    attrs = {"dedup_tokens": 4096}
    fwd = SimpleNamespace(name="layers.3.moe.dispatch_all_to_all", attrs=attrs)
    bwd = SimpleNamespace(name="layers.3.moe.dispatch_all_to_all.bwd", attrs=attrs)  # a combine
    comb = SimpleNamespace(name="layers.3.moe.combine_all_to_all", attrs=attrs)
    assert _deepep_measured_rate(fwd, h100, 64, 8) == 51e9  # EP 64: dispatch 51 GB/s, combine 50 GB/s
    assert _deepep_measured_rate(bwd, h100, 64, 8) == 50e9
    assert _deepep_measured_rate(comb, h100, 64, 8) == 50e9
    assert _deepep_measured_rate(fwd, h100, 16, 2) == 43e9
    assert _deepep_measured_rate(fwd, h100, 8, 1) is None  # one node: NVLink, the fabric model's
    assert _deepep_measured_rate(fwd, h100, 128, 16) is None  # no measurement at EP 128
    assert _deepep_measured_rate(SimpleNamespace(name=fwd.name, attrs={}), h100, 64, 8) is None  # not DeepEP
    a100 = collective_system_for(load_hardware("dgx-a100x8"))  # 200 Gb/s HDR NICs: not the measured setup
    assert _deepep_measured_rate(fwd, a100, 64, 8) is None

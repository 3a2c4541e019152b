"""Training memory of PyTorch FSDP2 as torchtitan runs it: the root group kept unsharded, the buffers its side
streams leave reserved, the eager loss under ``loss_parallel()`` and the tensor-parallel head's saved input.
Every expected value is computed by hand from the shapes (docs/training_memory.md)."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import (
    _fsdp_groups,
    _param_units,
    _saved_head_gather_bytes,
    evaluate_plan,
)
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo.transformer import zoo_config

#: 2 layers, d 128, 8 query heads of 16, 2 key/value heads, SwiGLU 256, untied head, vocabulary 512
CFG = tiny_gqa("tiny-fsdp", layers=2)
S = 256
#: one block in bf16: q 128x128, k and v 128x32, o 128x128, gate/up/down 3 x 128x256, two norms of 128
BLOCK = 2 * (2 * 128 * 128 + 2 * 128 * 32 + 3 * 128 * 256 + 2 * 128)
#: the root group (fully_shard on the whole model): embedding 512x128, output 128x512, final norm 128
ROOT = 2 * (2 * 512 * 128 + 128)


def _breakdown(plan: ParallelPlan, framework: str | None = None) -> dict[str, float]:
    res = evaluate_plan(CFG, load_hardware("dgx-h100"), plan, train=True, seq=S, recompute="full",
                        framework=framework)
    return res.stages[0].memory_breakdown()


def test_root_group_stays_unsharded_beside_two_blocks() -> None:
    b = _breakdown(ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8))
    # the groups the composition reads off the graph are the hand-counted ones (a block is the larger here)
    (sg,) = plan_graphs(CFG, ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8), train=True, seq=S)
    assert _fsdp_groups(_param_units(sg.graph)) == (ROOT, [BLOCK, BLOCK])
    assert BLOCK > ROOT
    assert b["buffers.fsdp_unsharded_params"] == ROOT + 2 * BLOCK
    # the reduce-scatter input live through the backward is a block's gradient in the fp32 reduce_dtype
    assert b["buffers.fsdp_reduce_scatter"] == 2 * BLOCK


#: Llama-3-8B (zoo llama-3-8b: vocabulary 128,256, d 4096, 32 query heads and 8 key/value heads of 128, SwiGLU
#: 14,336, untied head) cut to 2 layers: its root group (embedding + output projection + final norm) is larger
#: than a block, so it sets the side streams' reserve
L8B = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
#: one block in bf16 (436,224,000 bytes): q and o 4096x4096, k and v 4096x1024, gate/up/down 3 x 4096x14336, two norms of 4096
L8B_BLOCK = 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096)
#: embedding 128256x4096, output 4096x128256, final norm 4096 (2,101,354,496 bytes: 4.8 blocks)
L8B_ROOT = 2 * (2 * 128256 * 4096 + 4096)


def test_a_root_group_larger_than_a_block_sets_the_side_stream_reserve() -> None:
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    (sg,) = plan_graphs(L8B, plan, train=True, seq=S)
    assert _fsdp_groups(_param_units(sg.graph)) == (L8B_ROOT, [L8B_BLOCK, L8B_BLOCK])
    b = evaluate_plan(L8B, load_hardware("dgx-h100"), plan, train=True, seq=S,
                      recompute="full").stages[0].memory_breakdown()
    # the root group stays unsharded beside two blocks in flight
    assert b["buffers.fsdp_unsharded_params"] == L8B_ROOT + 2 * L8B_BLOCK
    # the largest group's all_gather_output is the root's, and its fp32 reduce_output 1/8 of it
    assert b["reserve.fsdp_all_gather_stream"] == L8B_ROOT
    assert b["reserve.fsdp_reduce_scatter_stream"] == L8B_ROOT * 2 / 8


def test_side_stream_buffers_stay_reserved() -> None:
    b = _breakdown(ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8))
    # the largest group's all_gather_output (here a block) and its fp32 reduce_output (1/8)
    assert b["reserve.fsdp_all_gather_stream"] == BLOCK
    assert b["reserve.fsdp_reduce_scatter_stream"] == BLOCK * 2 / 8
    # nothing without sharding
    solo = _breakdown(ParallelPlan(dp=1, fsdp=True, microbatch=1, global_batch=1))
    assert "reserve.fsdp_all_gather_stream" not in solo


def test_loss_parallel_holds_sixteen_bytes_per_logit(monkeypatch: pytest.MonkeyPatch) -> None:
    # tp 2: DTensor's loss handlers keep the fp32 log-softmax, zeros, sum and product at once (16 bytes per
    # local logit) where the compiled loss keeps the 16-bit logits and gradient (4); the December 2024 stack's
    # eager final norm (``eager_final_norm``) set apart, so that the loss alone differs
    from workloads import frameworks

    blocks = dataclasses.replace(frameworks.PROFILES["fsdp2-compile-blocks"], name="fsdp2-blocks-fused-final-norm",
                                 eager_final_norm=False)
    monkeypatch.setitem(frameworks.PROFILES, blocks.name, blocks)
    plan = ParallelPlan(tp=2, dp=4, fsdp=True, microbatch=1, global_batch=4)
    eager = _breakdown(plan, blocks.name)["activations"]
    compiled = _breakdown(plan, "fsdp2-compile")["activations"]
    logits = 1 * S * 512 // 2  # microbatch x tokens x the rank's vocabulary shard
    assert eager - compiled == pytest.approx((16.0 - 4.0) * logits)


def test_tensor_parallel_head_keeps_its_gathered_input() -> None:
    (sg,) = plan_graphs(CFG, ParallelPlan(tp=2, sequence_parallel=True), train=True, seq=S)
    # the gathered [1, 256, 128] bf16 input beyond the rank's [1, 128, 128] shard
    assert _saved_head_gather_bytes(sg.graph) == 2 * S * 128 - 2 * (S // 2) * 128
    (plain,) = plan_graphs(CFG, ParallelPlan(tp=2), train=True, seq=S)
    assert _saved_head_gather_bytes(plain.graph) == 0.0

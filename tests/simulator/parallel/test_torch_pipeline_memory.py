"""A pipeline rank's peak under torch.distributed.pipelining with FSDP2 (``_torch_pipeline_peak``), by hand.

gpt2 (d 768, 12 layers, vocabulary 50257) at seq 256, bf16, pp 2 x dp 4 with FSDP, full recomputation. One block
holds 7,087,872 parameters (14,175,744 bytes in bf16); the root group on the first chunk wte + wpe = 39,383,808
parameters (78,767,616 bytes). A stage's output (and the next stage's input) is one [1, 256, 768] bf16 tensor,
393,216 bytes; the last stage's logits [256, 50257] bf16, 25,731,584 bytes.
"""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import _chunk_work_bytes, _stash_bytes, evaluate_plan, stage_graphs
from workloads.parallel import ParallelPlan

BLOCK, ROOT = 2 * 7_087_872, 2 * 39_383_808
OUT, LOGITS = 256 * 768 * 2, 256 * 50257 * 2


def _run(plan: ParallelPlan, framework: str):  # noqa: ANN202
    return evaluate_plan("gpt2", load_hardware("dgx-h100"), plan, train=True, seq=256, dtype="bf16",
                         framework=framework, recompute="full")


def test_december_2024_stages_keep_their_per_microbatch_tensors() -> None:
    # 1F1B, 4 microbatches. Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3; its peak is B2 (one other microbatch in flight):
    # the outputs of its 4 forwards and 3 of its 4 gradient receive buffers (the fourth is the backward's input)
    plan = ParallelPlan(pp=2, dp=4, fsdp=True, microbatch=1, global_batch=16)
    res = _run(plan, "fsdp2-compile-blocks")
    first, last = (st.memory_breakdown() for st in res.stages)
    assert first["activations.pipeline_stage_buffers"] == 4 * OUT + 3 * OUT == 2_752_512
    # the last stage's peak is B3: the 4 microbatches' logits, the 3 input receive buffers not in flight and the 3
    # input gradients accumulated on the buffers of the microbatches already back-propagated
    assert last["activations.pipeline_stage_buffers"] == 4 * LOGITS + (3 + 3) * OUT == 105_285_632
    # the later stack (outputs no longer kept, pytorch/pytorch#153383) and 1F1B's state: the stage's parameters
    # gathered and its fp32 accumulators from the first backward on, as before
    later = [st.memory_breakdown() for st in _run(plan, "fsdp2").stages]
    assert [b["activations.pipeline_stage_buffers"] for b in later] == [0.0, 0.0]
    stage0 = 2 * 6 * 7_087_872 + ROOT
    assert later[0]["buffers.fsdp_unsharded_params"] == stage0
    assert later[0]["buffers.fsdp_unsharded_grads"] == 2 * stage0
    assert first["activations"] - later[0]["activations"] == pytest.approx(2_752_512)


def test_an_interleaved_rank_frees_one_chunks_accumulators_before_the_next_chunks() -> None:
    # pp 2 x vp 2, 2 microbatches: rank 0 holds chunks 0 (layers 0-2 and the root group) and 2 (layers 6-8) and
    # runs every forward first (2 x 2 warm-up forwards), then B(c2) B(c2) B(c0) B(c0). Chunk 2's last backward
    # reduce-scatters its fp32 accumulators and reshards its parameters, so chunk 0's backwards hold chunk 0's
    # alone: the peak is chunk 0's first backward, P0 + G0 + one stash of chunk 0 + chunk 0's working set
    plan = ParallelPlan(pp=2, dp=4, fsdp=True, microbatch=1, global_batch=8, schedule="interleaved", interleave=2)
    b = _run(plan, "fsdp2").stages[0].memory_breakdown()
    p0 = 3 * BLOCK + ROOT
    assert b["buffers.fsdp_unsharded_params"] == p0 == 121_294_848
    assert b["buffers.fsdp_unsharded_grads"] == 2 * p0 == 242_589_696  # fp32, chunk 0's only
    sgs = [sg for sg in stage_graphs("gpt2", plan, phase="prefill", seq=256, context=None, dtype="bf16", train=True,
                                     optimizer="adamw", batch=None, recompute="full", framework="fsdp2")
           if sg.stage == 0]
    assert [sg.layers for sg in sgs] == [(0, 3), (6, 9)]
    s0, s2 = (_stash_bytes(sg) for sg in sgs)
    w0, w2 = (_chunk_work_bytes(sg, plan) for sg in sgs)
    assert b["activations"] == pytest.approx(s0 + w0)
    # the other candidate, chunk 2's first backward (both chunks gathered, chunk 2's accumulators, chunk 0's two
    # microbatches and chunk 2's other one in flight), is lower; before, both chunks' parameters and accumulators
    # were held through the step beside the in-flight stash: 2 x 3 blocks of fp32 accumulators more than now
    at_chunk2 = (p0 + 3 * BLOCK) + 2 * 3 * BLOCK + 2 * s0 + s2 + w2
    assert at_chunk2 < p0 + 2 * p0 + s0 + w0

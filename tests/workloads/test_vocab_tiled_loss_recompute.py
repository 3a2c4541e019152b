"""A loss over chunks of the tokens with one chunk's logits live at a time (``ParallelPlan.loss_chunks``, MaxText's
``num_vocab_tiling``) runs the LM head's logits GEMM again in the backward: ``get_vocab_tiling_loss_linen``
(src/MaxText/maxtext_utils.py @ 50bafeb98) keeps only the hidden states for its ``custom_vjp`` and recomputes each
chunk's logits under ``jax.vjp`` in the backward scan."""

from __future__ import annotations

import dataclasses

import pytest

from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo.transformer import zoo_config


def _graph(loss_chunks: int, pp: int = 1):
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    plan = ParallelPlan(dp=4, pp=pp, fsdp=pp == 1, microbatch=1, global_batch=4 * max(1, pp),
                        loss_chunks=loss_chunks)
    return [sg.graph for sg in plan_graphs(cfg, plan, seq=512, dtype="bf16", train=True, recompute="full",
                                           framework="maxtext")]


def _matmul_flops(g) -> int:
    return sum(op.flops for op in g.ops if op.kind == "matmul")


def test_chunked_loss_adds_one_logits_gemm_by_hand():
    whole, chunked = _graph(1)[0], _graph(16)[0]
    # one more (512 tokens x 4096) @ (4096 x 128,256) GEMM, FMA = 2: 537,944,653,824 FLOPs
    assert _matmul_flops(chunked) - _matmul_flops(whole) == 2 * 512 * 4096 * 128256 == 537_944_653_824
    again = [op for op in chunked.ops if op.name.endswith("@recompute") and op.group.startswith(("lm_head", "loss"))]
    assert [op.name for op in again] == ["lm_head.logits@recompute", "loss.flatten@recompute"]
    # re-run before the loss's backward, which reads the recomputed logits, not the forward's
    names = [op.name for op in chunked.ops]
    assert names.index("lm_head.logits@recompute") < names.index("loss.cross_entropy.bwd")
    ce_bwd = next(op for op in chunked.ops if op.name == "loss.cross_entropy.bwd")
    assert ce_bwd.inputs[0].name == "loss.flatten@recompute"


def test_chunked_loss_leaves_stages_without_the_head_alone():
    first_whole, first_chunked = _graph(1, pp=2)[0], _graph(4, pp=2)[0]
    assert _matmul_flops(first_chunked) == pytest.approx(_matmul_flops(first_whole))
    assert not any("@recompute" in op.name for op in first_chunked.ops if op.group.startswith("lm_head"))

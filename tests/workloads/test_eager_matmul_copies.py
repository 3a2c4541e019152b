"""Eager attention's torch.matmul copies the permuted head views of q, k and v at batch > 1
(at::matmul reshapes both operands to (batch x heads, rows, cols))."""

from __future__ import annotations

import pytest

from workloads.resolve import load_workload
from workloads.training import training_graph


def _copies(g):
    return [op for op in g if ".core." in op.name and op.name.endswith("_contiguous")]


@pytest.mark.parametrize(("framework", "attention", "batch", "expected"), [
    ("eager", None, 4, 36),          # ViT-B/16: 12 layers x (q, k, v)
    ("eager", None, 1, 0),           # the size-1 batch merges with the heads: views
    ("sdpa", "decomposed", 4, 36),   # the model code's matmul path (no SDPA implementation)
    ("sdpa", None, 4, 0),            # one scaled_dot_product_attention call takes strided inputs
    ("compile", "decomposed", 4, 36),  # AOTAutograd traces at::matmul's decomposition: the clones stay
    ("compile", "decomposed", 1, 0),   # and at batch 1 they are views there too
    ("cuda-graphs", "decomposed", 4, 36),  # the eager kernels, replayed
])
def test_copies_by_stack_and_batch(framework, attention, batch, expected):
    kw = {"attention": attention} if attention else {}
    g = load_workload("vit_b16", batch=batch, dtype="fp32", framework=framework, **kw)
    copies = _copies(g)
    assert len(copies) == expected
    if expected:
        assert [op.name for op in copies[:3]] == ["layers.0.attn.core.q_contiguous", "layers.0.attn.core.k_contiguous",
                                                  "layers.0.attn.core.v_contiguous"]
        assert copies[0].outputs[0].shape == (batch, 12, 197, 64) and copies[0].kind == "transpose"
        assert g.op("layers.0.attn.core.qk").inputs[1] == copies[1].outputs[0]


def test_prefill_with_a_cache_is_left_as_it_was():
    g = load_workload("gpt2", batch=4, seq=128, phase="prefill", dtype="fp16", framework="eager")
    assert _copies(g) == []


def test_each_copy_has_a_copy_as_its_gradient():
    fwd = load_workload("bert_base", batch=2, seq=64, phase="train", dtype="fp16", framework="eager")
    step = training_graph(fwd, optimizer="sgd")
    assert len(_copies(fwd)) == 36
    bwd = [op for op in step if ".core." in op.name and op.name.endswith("_contiguous.bwd")]
    assert len(bwd) == 36 and {op.kind for op in bwd} == {"transpose"}

"""Pipeline stages built with the ``eager`` profile (Hugging Face model code run op by op): every stage carries the
decomposed attention, ``gelu_new`` as eight kernels and the dropout kernels, as ``predict --framework eager`` on one
device builds them; a split of the layers over ranks under that profile is refused.

Hand count for GPT-2 Large (36 layers, hidden 1280, 20 heads of 64) on 4 stages, stage 1 = layers 9..17. Hugging
Face's GPT-2 eager attention per layer: ``matmul(q, k^T)``, the division by ``sqrt(64)``, ``where(causal_mask, .,
min)``, softmax, attention dropout, ``matmul(p, v)`` (six kernels; no fused attention op); ``gelu_new``
(``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``): pow, scale, add, scale, tanh, add, scale, mul (eight).
"""

from __future__ import annotations

from collections import Counter

import pytest

from workloads.parallel import ParallelPlan, PlanError, plan_graphs

_PLAN = ParallelPlan(pp=4, microbatch=1, global_batch=8)
_CORE = (("qk", "matmul"), ("scale", "elementwise"), ("mask", "elementwise"), ("softmax", "softmax"),
         ("attn_dropout", "elementwise"), ("pv", "matmul"))


def _stage1(framework: str) -> tuple[list, dict]:
    sg = plan_graphs("gpt2-large", _PLAN, train=True, seq=1024, dtype="fp32", framework=framework)[1]
    assert sg.layers == (9, 18)
    fwd = list(sg.graph.ops[: sg.forward_ops])
    return fwd, {op.name: op for op in fwd}


def test_an_eager_pipeline_stage_has_the_decomposed_attention_of_each_of_its_layers() -> None:
    fwd, by_name = _stage1("eager")
    for layer in range(9, 18):
        for name, kind in _CORE:
            assert by_name[f"layers.{layer}.attn.core.{name}"].kind == kind
        acts = [op for op in fwd if op.name.startswith(f"layers.{layer}.mlp.act.")]
        assert len(acts) == 8 and all(op.kind == "elementwise" for op in acts)
    kinds = Counter(op.kind for op in fwd)
    assert "attention" not in kinds
    assert kinds["softmax"] == 9
    assert kinds["matmul"] == 9 * 6  # qkv, q k^T, p v, out, up, down per layer
    scores = by_name["layers.9.attn.core.softmax"].outputs[0].shape
    assert tuple(scores) == (1, 20, 1024, 1024)  # the full s x s scores of one microbatch, 20 heads


def test_the_default_pipeline_stage_keeps_one_fused_attention_op_per_layer() -> None:
    fwd, _ = _stage1("")
    kinds = Counter(op.kind for op in fwd)
    assert kinds["attention"] == 9 and kinds["softmax"] == 0
    assert kinds["matmul"] == 9 * 4


@pytest.mark.parametrize(("plan", "got"), [(ParallelPlan(tp=2, microbatch=1, global_batch=8), "tp 2"),
                                           (ParallelPlan(pp=2, cp=2, microbatch=1, global_batch=8), "cp 2")])
def test_the_hugging_face_code_split_over_ranks_is_refused(plan: ParallelPlan, got: str) -> None:
    with pytest.raises(PlanError) as e:
        plan_graphs("gpt2-large", plan, train=True, seq=1024, dtype="fp32", framework="eager")
    msg = str(e.value)
    assert msg.startswith("gpt2-large: --framework eager with a parallel plan") and f"got {got}" in msg and "expected tp 1" in msg
    assert "\n" not in msg

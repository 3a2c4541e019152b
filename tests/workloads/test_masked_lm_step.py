"""The BERT rows of the transformers SDPA training benchmark: the masked-LM head, logits.sum() and the mask."""

from __future__ import annotations

import pytest

from simulator.calibration.frameworks_validation import MLM_SUM_NOTE, _graph, load_framework_rows
from simulator.engines.analytical import module_call_counts
from workloads.frameworks import LOSS_OP_META, drop_optimizer, hf_masked_lm_forward, sum_loss
from workloads.resolve import load_workload
from workloads.training import training_graph

HEAD = ["cls.predictions.transform.dense", "cls.predictions.transform.act", "cls.predictions.transform.LayerNorm",
        "cls.predictions.decoder", "loss.flatten", "loss.logits_sum"]


def _forward(profile: str, batch: int = 4, seq: int = 256):
    g = load_workload("bert_base", batch=batch, seq=seq, phase="train", dtype="fp16", framework=profile)
    return g, hf_masked_lm_forward(g, profile)


def test_eager_head_mask_and_matmul_copies():
    g, f = _forward("eager")
    names = [op.name for op in f]
    # the pooler, the 2-class classifier and its cross-entropy go (6 ops); the masked-LM head and the sum come
    assert not any(n.startswith(("pooler.", "head.", "loss.cross_entropy")) for n in names)
    assert names[-6:] == HEAD
    dec = f.op("cls.predictions.decoder")
    assert dec.inputs[1].name == "embed.tokens.weight" and dec.attrs["transpose_b"] is True  # tied to the embeddings
    assert dec.outputs[0].shape == (4, 256, 30522) and dec.inputs[2].shape == (30522,)
    # mask: ones, cast, (1 - m), * finfo.min, then the (b, 1, 1, s) view; one add over the scores per layer
    assert [n for n in names if n.startswith("mask.")] == ["mask.ones", "mask.to_dtype", "mask.rsub", "mask.mul_min",
                                                          "mask.extended"]
    adds = [op for op in f if op.name.endswith(".core.mask_add")]
    assert len(adds) == 12 and adds[0].inputs[1].shape == (4, 1, 1, 256)
    assert f.op("layers.0.attn.core.softmax").inputs[0] == adds[0].outputs[0]
    # at batch 4 torch.matmul copies q, k (for QK^T) and v (for PV): 3 per layer, in the eager graph itself
    copies = [op for op in f if op.name.endswith("_contiguous") and ".core." in op.name]
    assert len(copies) == 36 and {op.kind for op in copies} == {"transpose"}
    assert f.op("layers.0.attn.core.qk").inputs[0] == f.op("layers.0.attn.core.q_contiguous").outputs[0]
    assert f.op("layers.0.attn.core.pv").inputs[1] == f.op("layers.0.attn.core.v_contiguous").outputs[0]
    assert len(f.ops) == len(g.ops) - 6 + 5 + 12 + 6
    # the mask is made after the embeddings, as BertModel.forward does
    assert names.index("mask.ones") == names.index("embed.dropout") + 1


def test_eager_batch_one_has_no_matmul_copies():
    _, f = _forward("eager", batch=1)
    assert not any(op.name.endswith("_contiguous") and ".core." in op.name for op in f)


def test_sdpa_tests_the_mask_and_passes_none():
    g, f = _forward("sdpa")
    assert [op.name for op in f if op.name.startswith("mask.")] == ["mask.ones", "mask.eq_one", "mask.all", "mask.item"]
    assert not any(op.name.endswith("mask_add") or ".core." in op.name and op.name.endswith("_contiguous") for op in f)
    assert len(f.ops) == len(g.ops) - 6 + 4 + 6


def test_sum_loss_step():
    _, f = _forward("sdpa")
    step = drop_optimizer(sum_loss(training_graph(f, optimizer="adamw")))
    total = step.op("loss.logits_sum")
    assert total.kind == "reduction" and total.attrs["op"] == "sum" and total.inputs[0].shape == (1024, 30522)
    grad = step.op("loss.logits_sum.bwd")  # the expanded ones made dense for the decoder's GEMMs
    assert grad.kind == "elementwise" and grad.outputs[0].shape == (1024, 30522)
    assert step.meta[LOSS_OP_META] == "loss.logits_sum"
    assert not any(op.kind in ("cross_entropy", "cross_entropy_bwd", "optimizer_update") for op in step)
    # the tied matrix gets the embedding's gradient and the decoder's weight gradient, summed
    assert step.op("cls.predictions.decoder.bwd_b").outputs[0].shape == (30522, 768)
    assert any(op.name.startswith("grad_acc:embed.tokens.weight") for op in step)
    # module calls end at the sum: nothing of autograd's backward is a module call
    calls = module_call_counts(step)
    assert "cls.predictions.decoder" in calls and calls["cls.predictions.decoder"][1] == 1
    assert not any(".bwd" in n or n.startswith("loss.") for n in calls)


def test_rows_stating_the_step_get_it():
    ms, parsed = load_framework_rows()
    rows = {m.id: (m, p, o) for m, (p, o) in zip(ms, parsed, strict=True)}
    stated = sorted(i for i, (m, _, _) in rows.items() if MLM_SUM_NOTE in m.notes)
    assert stated == [f"fw-{i:03d}" for i in range(1, 13)]
    g = _graph(*rows["fw-001"])
    assert g.meta["optimizer"] == "none" and g.meta[LOSS_OP_META] == "loss.logits_sum"
    assert any(op.name == "cls.predictions.decoder" for op in g)
    assert any(op.name == "layers.11.attn.core.mask_add" for op in g)  # fw-001 is an eager row


@pytest.mark.parametrize(("model", "profile", "match"), [
    ("gpt2", "eager", "no .head.classifier. op"),
    ("bert_base", "compile", "expected eager or sdpa"),
])
def test_bad_input(model, profile, match):
    g = load_workload(model, batch=2, seq=128, phase="train", dtype="fp16", framework="eager")
    with pytest.raises(ValueError, match=match):
        hf_masked_lm_forward(g, profile)


def test_sum_loss_refuses_other_graphs():
    g = training_graph(load_workload("bert_base", batch=2, seq=128, phase="train", dtype="fp16"), optimizer="sgd")
    with pytest.raises(ValueError, match="no 'loss.logits_sum' op"):
        sum_loss(g)


def test_engines_agree_on_the_sum_loss_step():
    """The module calls end at meta['loss_op'] in every engine: the DES and the analytical engine agree."""
    from hwmodels.catalog import load_device
    from simulator import EvalOptions, evaluate, simulate

    _, f = _forward("eager", batch=2, seq=64)
    step = drop_optimizer(sum_loss(training_graph(f, optimizer="adamw")))
    a100 = load_device("a100-sxm4-80gb")
    eager = EvalOptions(eager_framework=True, eager_modules=True)
    ref = evaluate(step, a100, eager)
    assert simulate(step, a100, eager, streams=1).latency_s == pytest.approx(ref.latency_s, rel=1e-12)
    # the forward's module calls: without the stop at the sum, backward ops would open containers too
    calls = module_call_counts(step)
    forward = {op.name for op in step}
    names = [op.name for op in step]
    assert max(names.index(n) for n in calls if n in forward) < names.index("loss.logits_sum")

"""The keep-masks training dropouts save for their backward, in the activation memory of a training step:
per-layer stash of the Megatron-LM (2021-2022) GPT layer against Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", arXiv:2205.05198), Sec. 4 eq. 1-2 and Table 2, for the four models
of their Table 3, and the masks' lifetimes in the step's peak."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.parallel.compose import _stash_bytes
from simulator.report.memory import dropout_mask_ranges, peak_activation_bytes
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo.transformer import zoo_config

SEQ = 2048

#: Korthikanti et al. 2022, Table 3: (attention heads a, hidden size h) of the 22B, 175B, 530B and 1T models
#: (the zoo entries carry these sizes; 175B is GPT-3's, Brown et al. 2020 Table 2.1)
MODELS = {"gpt-22b-korthikanti2022": (64, 6144), "gpt3-175b": (96, 12288),
          "gpt-530b-korthikanti2022": (128, 20480), "gpt-1t-korthikanti2022": (160, 25600)}


def _per_layer_bytes(model: str, recompute: str, microbatch: int = 1, framework: str = "megatron-lm",
                     **plan: object) -> float:
    """Stash bytes one more layer adds to the training step of one microbatch (bf16)."""
    cfg = zoo_config(model)
    out = []
    for n in (2, 3):
        sg = plan_graphs(dataclasses.replace(cfg, layers=n), ParallelPlan(microbatch=microbatch, **plan), train=True,
                         seq=SEQ, recompute=recompute, framework=framework, dtype="bf16")[0]
        out.append(_stash_bytes(sg))
    return out[1] - out[0]


def _korthikanti(a: int, h: int, b: int, t: int, sp: bool, selective: bool) -> float:
    """Bytes per layer of Korthikanti et al. 2022 Table 2 (16-bit activations, dropout in every layer):
    no parallelism sbh (34 + 5as/h) (eq. 1); tensor parallel sbh (10 + 24/t + 5as/(ht)) (eq. 2); with sequence
    parallelism sbh (34/t + 5as/(ht)); selective recomputation drops the 5as^2b/t terms (the attention core,
    its softmax output, its dropout mask and output, is recomputed)."""
    s = SEQ
    per_token = 34.0 / t if (sp or t == 1) else 10.0 + 24.0 / t
    core = 0.0 if selective else 5.0 * a * s / (h * t)
    return s * b * h * (per_token + core)


_PLANS = [  # (recompute, plan)
    ("none", {}),
    ("none", {"tp": 8}),
    ("none", {"tp": 8, "sequence_parallel": True}),
    ("selective", {"tp": 8}),
    ("selective", {"tp": 8, "sequence_parallel": True}),
]


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize(("recompute", "plan"), _PLANS)
def test_megatron_lm_layer_stash_matches_korthikanti_table2(model: str, recompute: str, plan: dict) -> None:
    # Exact: the model counts what the formula counts and nothing else here. Of the 34 sbh, the two 1-byte
    # masks of the attention-output and MLP-output dropouts are sbh each (sbh/t with sequence parallelism);
    # of the 5as^2b, the attention-probability dropout's mask is as^2b (/t); the LayerNorm statistics
    # (fp32 mean and rstd, 8 bytes per token) are outside both the formula and the graph.
    a, h = MODELS[model]
    t = int(plan.get("tp", 1))
    expected = _korthikanti(a, h, 1, t, bool(plan.get("sequence_parallel")), recompute == "selective")
    assert _per_layer_bytes(model, recompute, **plan) == pytest.approx(expected, rel=1e-12)


def test_22b_layer_stash_in_bytes_at_the_table4_microbatch() -> None:
    # 22B, microbatch 4, t = 8 with sequence parallelism, no recomputation: sbh (34/8 + 5 * 64 * 2048 / (6144 * 8))
    # = 2048 * 4 * 6144 * (4.25 + 13.333...) bytes = 885 MiB per layer (50331648 * 17.5833 = 884998144)
    assert _per_layer_bytes("gpt-22b-korthikanti2022", "none", microbatch=4, tp=8,
                            sequence_parallel=True) == pytest.approx(884998144.0, rel=1e-12)


def test_the_masks_are_what_the_dropout_adds() -> None:
    # the same layer without dropout (the default graph: fused attention, no dropout) keeps 32 sbh / t: the
    # megatron-lm profile's 34/t + 5as/(ht) less its masks (2/t + as/(ht)) and the unfused core's 4as/(ht)
    a, h, t = 64, 6144, 8
    sbh = SEQ * h
    plain = _per_layer_bytes("gpt-22b-korthikanti2022", "none", framework="", tp=t, sequence_parallel=True)
    drop = _per_layer_bytes("gpt-22b-korthikanti2022", "none", tp=t, sequence_parallel=True)
    assert plain == pytest.approx(32.0 / t * sbh, rel=1e-12)
    assert drop - plain == pytest.approx((2.0 / t + 5.0 * a * SEQ / (h * t)) * sbh, rel=1e-12)


def _megatron_graph(recompute: str):
    cfg = dataclasses.replace(zoo_config("gpt-22b-korthikanti2022"), layers=2)
    return plan_graphs(cfg, ParallelPlan(tp=8, sequence_parallel=True), train=True, seq=SEQ, recompute=recompute,
                       framework="megatron-lm", dtype="bf16")[0].graph


def test_a_recomputed_dropout_keeps_its_mask_only_from_the_rerun_to_its_backward() -> None:
    g = _megatron_graph("selective")
    idx = {op.name: i for i, op in enumerate(g.ops)}
    ranges = {g.ops[a].name: (a, b, m) for a, b, m in dropout_mask_ranges(g)}
    name = "layers.0.attn.core.attn_dropout"
    n = 1 * 8 * SEQ * SEQ  # (b, a/t, s, s) probabilities on one rank, one byte each
    assert ranges[name] == (idx[name], idx[name], n)  # the checkpointed forward saves nothing
    assert ranges[f"{name}@recompute"] == (idx[f"{name}@recompute"], idx[f"{name}.bwd"], n)
    # not recomputed: the attention-output dropout's mask lives from the forward to its backward, s/t x h
    res = "layers.0.attn.resid_dropout"
    assert ranges[res] == (idx[res], idx[f"{res}.bwd"], SEQ // 8 * 6144)


def test_the_step_peak_holds_the_masks_live_at_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # the peak is at the start of the backward pass, where every mask the forward saved is live: the layers'
    # 2 x (2 x s/t x h + a/t x s^2) bytes and the embedding dropout's s/t x h
    g = _megatron_graph("none")
    saved = sum(m for a, b, m in dropout_mask_ranges(g) if b > a)
    assert saved == 2 * (2 * SEQ // 8 * 6144 + 8 * SEQ * SEQ) + SEQ // 8 * 6144
    with_masks = peak_activation_bytes(g)
    from simulator.report import memory as M

    monkeypatch.setattr(M, "dropout_mask_ranges", lambda graph: [])
    assert with_masks - peak_activation_bytes(g) == saved

"""Transformer Engine's per-layer CUDA graphs (Megatron-Core ``cuda_graph_impl="transformer_engine"``): the static
buffers they keep beside the eager step's memory, hand-computed from shapes (docs/training_memory.md,
"Transformer Engine's per-layer CUDA graphs"); the rows whose notes state them; the CLI flags."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.engines.options import EvalOptions
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan, PlanError

MIB = 2**20
# Llama-3-8B (hidden 4096, 32 layers) on 16 H100s: tp 2 with sequence parallelism, 2 stages x 2 virtual chunks,
# 4 microbatches of one 2,048-token sequence a pipeline
PLAN = ParallelPlan(tp=2, pp=2, dp=4, sequence_parallel=True, microbatch=1, global_batch=16, schedule="interleaved",
                    interleave=2)


def _eval(plan: ParallelPlan, system: str = "dgx-h100x2", seq: int = 2048):
    opts = EvalOptions(**get_profile("megatron-core").cost_options())
    return evaluate_plan("llama-3-8b", load_hardware(system), plan, opts, train=True, seq=seq,
                         framework="megatron-core")


def _parts(res, stage: int) -> dict[str, float]:
    return dict(res.stages[stage].memory_parts)


def test_mlp_scope_keeps_the_sent_chunk_outputs_and_one_grad_buffer() -> None:
    """Scope mlp: every layer's MLP graph outputs the layer's output. By hand: a (2048 / tp 2 = 1024, 1, 4096)
    bf16 tensor is 8 MiB. Stage 0 (interleaved, 4 microbatches, pp 2, vp 2): Megatron-Core's warmup is
    (2 - 0 - 1) x 2 + (2 - 1) x 2 = 4 chunk-microbatches, 5 in flight, both chunks' outputs sent: 5 x 8 MiB = 40 MiB
    held in the graph pool; the last stage sends its first chunk's only (in flight 1.5 stage-microbatches x 1
    chunk x 8 MiB = 12 MiB); one 8 MiB static gradient buffer each. No attention mask (attention stays eager).
    The step time is the eager plan's."""
    eager = _eval(PLAN)
    graphs = _eval(replace(PLAN, cuda_graph="transformer_engine", cuda_graph_scope=("mlp",)))
    assert [st.in_flight for st in graphs.stages] == [2.5, 1.5]
    for stage, sent in ((0, 40 * MIB), (1, 12 * MIB)):
        p = _parts(graphs, stage)
        assert p["buffers.te_cuda_graph_sent_outputs"] == sent
        assert p["buffers.te_cuda_graph_grad_outputs"] == 8 * MIB
        assert p["buffers.te_cuda_graph_attention_masks"] == 0.0
        assert p["total"] == pytest.approx(_parts(eager, stage)["total"] + sent + 8 * MIB, rel=1e-12)
    assert graphs.latency_s == eager.latency_s


def test_attn_scope_without_pipeline_keeps_one_mask_per_layer() -> None:
    """Scope attn, no pipeline (the helper captures one microbatch): 32 layers, each with its own boolean mask of
    (microbatch 2, 1, 2048, 2048) = 8 MiB -> 256 MiB; the graph's output is the attention's (no chunk output
    kept); one static gradient buffer of (2048, 2, 4096) bf16 = 32 MiB."""
    plan = ParallelPlan(dp=8, microbatch=2, global_batch=32, cuda_graph="transformer_engine", cuda_graph_scope=("attn",))
    p = _parts(_eval(plan, "dgx-h100"), 0)
    assert p["buffers.te_cuda_graph_attention_masks"] == 32 * 2 * 2048 * 2048 == 256 * MIB
    assert p["buffers.te_cuda_graph_sent_outputs"] == 0.0
    assert p["buffers.te_cuda_graph_grad_outputs"] == 2048 * 2 * 4096 * 2 == 32 * MIB


@pytest.mark.parametrize("kw, msg", [
    (dict(cuda_graph="transformer_engine", cuda_graph_scope=("mlpp",)),
     "cuda_graph_scope: got 'mlpp'; expected one of attn, mlp, moe, moe_router, moe_preprocess, mamba; did you mean 'mlp'"),
    (dict(cuda_graph="full_iteration", cuda_graph_scope=("mlp",)),
     "cuda_graph_scope: got ['mlp'] with cuda_graph 'full_iteration'; expected cuda_graph 'transformer_engine'"),
    (dict(cuda_graph="transformer_enigne"), "cuda_graph: got 'transformer_enigne'; expected one of"),
    (dict(cuda_graph="transformer_engine", cuda_graph_scope=("moe_preprocess",)),
     "cuda_graph_scope: got 'moe_preprocess' without 'moe_router'"),
    (dict(cuda_graph="transformer_engine", cuda_graph_scope=("moe", "moe_router")),
     "cuda_graph_scope: got both 'moe' and 'moe_router'"),
])
def test_bad_graph_fields_are_refused(kw: dict, msg: str) -> None:
    with pytest.raises(PlanError) as e:
        ParallelPlan(**kw)
    assert msg in str(e.value)


def test_rows_stating_transformer_engine_graphs_read_them() -> None:
    """train-142/143 (scope mlp), 059, 066, 068 (their MoE scopes) read the graphs from their notes; the dropless
    MoE rows keep their dispatcher's host sync (the per-layer graphs do not capture the dispatch)."""
    from simulator.parallel.training_validation import _moe_host_sync, _plan, load_training_rows

    rows = {r.id: r for r in load_training_rows()}
    want = {"train-142": ("mlp",), "train-143": ("mlp",), "train-059": ("moe_router", "moe_preprocess"),
            "train-066": ("attn", "moe_router", "moe_preprocess"), "train-068": ("attn", "moe_router", "moe_preprocess")}
    for rid, scope in want.items():
        g = rows[rid].ints
        plan = _plan(rows[rid], g["n_devices"] // ((g.get("tp") or 1) * (g.get("pp") or 1) * (g.get("cp") or 1)))
        assert (plan.cuda_graph, plan.cuda_graph_scope) == ("transformer_engine", scope), rid
    assert all(_moe_host_sync(rows[r]) for r in ("train-059", "train-066", "train-068"))


def test_a_bad_scope_in_notes_is_one_located_error() -> None:
    from simulator.calibration.measurements import MeasurementError
    from simulator.parallel.training_validation import _cuda_graph_config

    with pytest.raises(MeasurementError, match="train-x: notes: cuda_graph_scope: got 'atn'; expected scope names"):
        _cuda_graph_config({"id": "train-x", "framework": "Megatron-Bridge",
                            "notes": "cuda_graph_impl transformer_engine with cuda_graph_scope atn, mlp;"})


ARGS = ("predict", "llama-3-8b", "--hardware", "dgx-h100x2", "--train", "--tp", "2", "--pp", "2", "--interleave", "2",
        "--schedule", "interleaved", "--dp", "4", "--sequence-parallel", "--microbatch", "1", "--global-batch", "16",
        "--seq", "2048", "--framework", "megatron-core")


def test_cli_flags_reach_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--cuda-graph", "transformer_engine", "--cuda-graph-scope", "mlp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["plan"]["cuda_graph"], out["plan"]["cuda_graph_scope"]) == ("transformer_engine", ["mlp"])
    assert out["memory_breakdown"]["buffers.te_cuda_graph_sent_outputs"] == 40 * MIB


@pytest.mark.parametrize("flags, msg", [
    (("--cuda-graph", "transformer_engine", "--cuda-graph-scope", "mlp,atn"),
     "argument --cuda-graph-scope: unknown CUDA graph scope; got 'atn'; expected one of attn, mlp"),
    (("--cuda-graph-scope", "mlp"), "cuda_graph_scope: got ['mlp'] with cuda_graph ''; expected cuda_graph "
                                    "'transformer_engine'"),
])
def test_cli_bad_scope_is_one_located_line(capsys: pytest.CaptureFixture[str], flags: tuple[str, ...],
                                           msg: str) -> None:
    try:
        rc = main([*ARGS, *flags])
    except SystemExit as e:  # argparse refuses a bad flag value itself
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and msg in err[0], err

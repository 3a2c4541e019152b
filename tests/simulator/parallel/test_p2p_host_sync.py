"""Megatron's device sync after every pipeline stage exchange (``ParallelPlan.p2p_host_sync``): each pipeline send
ends a host-sync interval (simulator.parallel.host_sync); hand-computed intervals, the sends a stage graph has,
and the rows whose stack runs it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from simulator.parallel.host_sync import pipeline_send_ops, sync_interval_excess
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.parallel import ParallelPlan, PlanError, plan_graphs

#: 4 layers, d 128, 8 query heads of 16, 2 key/value heads, SwiGLU 256, untied head, vocabulary 512
CFG = tiny_gqa("tiny-p2p-sync", layers=4)


def _rec(time_us: float, kernels: int) -> SimpleNamespace:
    return SimpleNamespace(time_s=time_us * 1e-6, kernels=kernels, group="layers.0")


def test_a_send_splits_the_microbatch_into_two_intervals_by_hand():
    # forward [A 100 us, send 10 us], backward [B 100 us, C 100 us], one kernel each, 20 us of issue per kernel.
    # No sync: nothing added. The send synchronising (index 1): interval [A, send] from an idle GPU: A issued at
    # 20 runs 20-120, the send issued at 40 runs 120-130: 130 us for G = 110 -> +20, and the 5.8 us round trip;
    # interval [B, C] from an idle GPU again: B runs 20-120, C (issued at 40) 120-220: +20, all backward
    recs = [_rec(100, 1), _rec(10, 1), _rec(100, 1), _rec(100, 1)]
    assert sync_interval_excess(recs, [], 2, 20e-6, 5.8e-6) == (0.0, 0.0)
    f, b = sync_interval_excess(recs, [1], 2, 20e-6, 5.8e-6)
    assert (f, b) == (pytest.approx(25.8e-6), pytest.approx(20e-6))
    # the backward's own send (index 3) adds its round trip to the backward; its interval is the same
    f, b = sync_interval_excess(recs, [1, 3], 2, 20e-6, 5.8e-6)
    assert (f, b) == (pytest.approx(25.8e-6), pytest.approx(25.8e-6))


def test_each_stage_graph_syncs_at_its_own_sends():
    # the first stage sends its activations at the end of its forward and receives their gradient (no send in
    # its backward: Megatron-Core's send_backward_recv_forward skips the first stage); the last stage receives
    # activations and sends their gradient back at the end of its backward
    first, last = plan_graphs(CFG, ParallelPlan(pp=2, microbatch=1, global_batch=4), seq=256, train=True)
    (s0,) = pipeline_send_ops(first.graph.ops)
    assert s0 == first.forward_ops - 1 and first.graph.ops[s0].name == "pipeline.send"
    (s1,) = pipeline_send_ops(last.graph.ops)
    assert s1 >= last.forward_ops and last.graph.ops[s1].name == "pipeline.recv.bwd"
    (only,) = plan_graphs(CFG, ParallelPlan(microbatch=1), seq=256, train=True)
    assert pipeline_send_ops(only.graph.ops) == []  # no stages, no exchange


def test_the_plan_switch_prices_the_syncs_of_each_stage():
    # Llama 3 8B's first 4 layers over 2 stages, 4,096 tokens a microbatch on an H100 under the megatron-core
    # profile: every op after a sync is GPU-bound, so each interval waits only for its first op's issue
    # (efficiency.framework_op_overhead_s, 20 us), and each send adds its round trip (efficiency.host_sync_s,
    # 5.8 us). Stage 0: the forward [embedding .. send] from an idle GPU (the embedding's 26.5 us kernel issued
    # at 20 us) +20 +5.8; its backward [gradient receive .. end] +20. Stage 1 (the last) syncs once, at its
    # backward's send: the interval [receive .. send] spans both passes, +20 shared by their GPU time, +5.8 to
    # the backward; the ops after the send (none but the optimizer, left out) add nothing
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import _cost_graphs, stage_graphs
    from simulator.parallel.stacks import profile_options
    from workloads.zoo.transformer import zoo_config

    hw, opts = load_hardware("dgx-h100"), profile_options("megatron-core")
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=4)
    plan = ParallelPlan(pp=2, microbatch=1, global_batch=4)
    graphs = stage_graphs(cfg, plan, seq=4096, train=True, dtype="bf16", framework="megatron-core")
    off = _cost_graphs(graphs, hw, opts, evaluate, 2)[1]
    on = _cost_graphs(graphs, hw, opts, evaluate, 2, p2p_sync=True)[1]
    (d0f, d0b), (d1f, d1b) = ((b.split[0] - a.split[0], b.split[1] - a.split[1]) for a, b in zip(off, on, strict=True))
    assert (d0f, d0b) == (pytest.approx(25.8e-6), pytest.approx(20e-6))
    share = off[1].split[0] / (off[1].split[0] + off[1].split[1])
    assert (d1f, d1b) == (pytest.approx(20e-6 * share), pytest.approx(20e-6 * (1 - share) + 5.8e-6))
    assert all(b.split[2:] == a.split[2:] for a, b in zip(off, on, strict=True))  # optimizer, communication


def test_a_non_boolean_p2p_host_sync_is_refused_and_the_default_reads_as_before():
    with pytest.raises(PlanError, match="p2p_host_sync: got 'yes'; expected true or false"):
        ParallelPlan(pp=2, p2p_host_sync="yes")  # type: ignore[arg-type]
    assert "p2p_host_sync" not in ParallelPlan(pp=2).to_json()
    assert ParallelPlan(pp=2, p2p_host_sync=True).to_json()["p2p_host_sync"] is True


def test_megatron_bridge_rows_sync_without_virtual_stages_only():
    from simulator.parallel import training_validation as tv

    rows = {r.id: r for r in tv.load_training_rows()}
    plans = {rid: tv._plan(rows[rid], _dp(rows[rid])) for rid in ("train-057", "train-063", "train-070", "train-055",
                                                                    "train-060", "train-059", "train-138")}
    # PP 16, 4, 8 with VP 1 or none: batch_p2p_comm; VP 8, VP 2: overlap_p2p_comm; PP 1: no exchange;
    # NeMo AutoModel's torch pipelining: not Megatron-Core's p2p path
    assert {rid for rid, p in plans.items() if p.p2p_host_sync} == {"train-057", "train-063", "train-070"}


def _dp(row) -> int:  # noqa: ANN001
    g = row.ints
    return g["n_devices"] // ((g.get("tp") or 1) * (g.get("pp") or 1) * (g.get("cp") or 1))


def test_megatron_lm_pipeline_rows_sync(monkeypatch: pytest.MonkeyPatch):
    import csv

    import simulator.parallel.compose as compose
    from simulator.parallel import validation as mv

    seen: dict[str, ParallelPlan] = {}

    def fake(model, system, plan, *a, **k):  # noqa: ANN001, ANN002, ANN003
        seen[model] = plan
        raise RuntimeError("stop")

    monkeypatch.setattr(compose, "evaluate_plan", fake)
    rows = {r["id"]: r for r in csv.DictReader(mv.DEFAULT_MULTI_DATASET.open())}
    for rid, want in (("multi-028", True), ("multi-025", False)):  # Megatron-LM PP 8 / PP 1 (Korthikanti 2022)
        seen.clear()
        with pytest.raises(RuntimeError, match="stop"):
            mv._predict_row(rows[rid])
        assert seen[rows[rid]["model"]].p2p_host_sync is want


def test_the_cli_flag_reaches_the_plan(capsys: pytest.CaptureFixture[str]):
    import json

    from simulator.cli.main import main

    base = ("predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--pp", "2", "--microbatch", "1",
            "--global-batch", "4", "--seq", "2048", "--framework", "megatron-core", "--json")
    assert main([*base]) == 0
    free = json.loads(capsys.readouterr().out)
    assert main([*base, "--p2p-host-sync"]) == 0
    synced = json.loads(capsys.readouterr().out)
    assert synced["plan"]["p2p_host_sync"] is True and "p2p_host_sync" not in free["plan"]
    assert synced["latency_s"] > free["latency_s"] + 4 * 5.8e-6  # a round trip per send, at least


def test_dataclass_field_is_a_plan_key():
    from simulator.sweep.experiment import PLAN_KEYS

    assert "p2p_host_sync" in PLAN_KEYS
    assert "p2p_host_sync" in {f.name for f in dataclasses.fields(ParallelPlan)}


def test_p2p_host_sync_without_stages_is_refused(capsys):
    """The switch follows a stage's send: a plan of one stage has none, so the flag is one located line, exit 2."""
    from simulator.cli import main

    rc = main(["predict", "gpt2", "--hardware", "dgx-h100", "--train", "--dp", "8", "--microbatch", "1",
               "--global-batch", "8", "--p2p-host-sync"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "p2p_host_sync: got true with pp 1; expected pp > 1" in err[0]

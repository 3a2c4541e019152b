"""Chrome trace of a parallel plan: one process per pipeline stage with compute / communication /
data-parallel tracks, the schedule's microbatch passes, collectives as events, the bubble as gaps."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from simulator.hardware import load_hardware
from simulator.parallel import evaluate_plan
from simulator.report.trace import PLAN_TRACKS, plan_to_chrome_trace
from workloads.parallel import ParallelPlan


@pytest.fixture(scope="module")
def four_stage():
    plan = ParallelPlan(pp=4, dp=2, microbatch=1, global_batch=16)  # 1F1B, 8 microbatches
    res = evaluate_plan("gpt2", load_hardware("dgx-h100"), plan, train=True, seq=512)
    return res, plan_to_chrome_trace(res)


def _tracks(trace):
    out = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            out[(e["pid"], e["tid"])].append((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6, e["name"], e["cat"]))
    return {k: sorted(v) for k, v in out.items()}


def test_one_process_per_stage_with_its_streams(four_stage) -> None:
    res, trace = four_stage
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert sorted(procs) == [0, 1, 2, 3] and all(v.startswith(f"stage {k} ") for k, v in procs.items())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert {threads[(s, t)] for s in range(4) for t in range(3)} == set(PLAN_TRACKS)
    tracks = _tracks(trace)
    for s in range(4):  # every microbatch forward and backward once on every stage
        passes = [x for x in tracks[(s, 0)] if x[3] in ("forward", "backward")]
        assert sorted(n for *_, n, _c in passes) == sorted([f"F{i}" for i in range(8)] + [f"B{i}" for i in range(8)])
    # tensor-parallel collectives / sends and the gradient all-reduce are events of their own
    assert any(c == "collective" for s in range(4) for *_, c in tracks.get((s, 1), []))
    assert all(n == "data-parallel gradient sync" for s in range(4) for _, _, n, _ in tracks[(s, 2)])


def test_events_do_not_overlap_within_a_track(four_stage) -> None:
    _, trace = four_stage
    for key, evs in _tracks(trace).items():
        for (_, e0, n0, _), (s1, _, n1, _) in zip(evs, evs[1:], strict=False):
            assert s1 >= e0 - 1e-12, (key, n0, n1)


def test_span_is_the_predicted_step_and_the_bubble_the_models(four_stage) -> None:
    res, trace = four_stage
    tracks = _tracks(trace)
    end = max(e for evs in tracks.values() for _, e, _, _ in evs)
    start = min(s for evs in tracks.values() for s, _, _, _ in evs)
    assert start == 0.0
    assert end == pytest.approx(res.latency_s, rel=1e-9)
    # the bottleneck stage's idle time inside the pipeline = the model's bubble
    k, t_pipe = res.pipeline.bottleneck_stage, res.pipeline.step_s
    busy = sum(min(e, t_pipe) - s for tid in (0, 1) for s, e, _, c in tracks.get((k, tid), [])
               if c in ("forward", "backward", "collective") and s < t_pipe)
    assert t_pipe - busy == pytest.approx(res.pipeline.bubble_s, rel=1e-9)
    assert res.pipeline.bubble_s > 0
    assert float(trace["otherData"]["bubble_s"]) == res.pipeline.bubble_s


def test_inference_plan_passes_the_batch_through_the_stages() -> None:
    res = evaluate_plan("gpt2", load_hardware("dgx-h100"), ParallelPlan(tp=2, pp=2), phase="prefill", seq=256,
                        batch=4)
    tracks = _tracks(plan_to_chrome_trace(res))
    (f0,) = [x for x in tracks[(0, 0)] if x[3] == "forward"]
    (f1,) = [x for x in tracks[(1, 0)] if x[3] == "forward"]
    assert f0[0] == 0.0 and f1[0] == pytest.approx(res.stages[0].forward_s, rel=1e-12)
    end = max(e for evs in tracks.values() for _, e, _, _ in evs)
    assert end == pytest.approx(res.latency_s, rel=1e-9)


def test_cli_writes_a_plan_trace_and_refuses_one_for_a_request(tmp_path, capsys) -> None:
    from simulator.cli.main import main

    out = tmp_path / "plan.json"
    rc = main(["predict", "gpt2", "--hardware", "dgx-h100", "--pp", "4", "--dp", "2", "--train", "--seq", "256",
               "--microbatch", "1", "--global-batch", "8", "--trace", str(out)])
    assert rc == 0 and "wrote a Chrome trace of 4 pipeline stage(s)" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert {e["pid"] for e in data["traceEvents"]} == {0, 1, 2, 3}
    rc = main(["predict", "gpt2", "--hardware", "dgx-h100", "--tp", "2", "--phase", "generate", "--trace",
               str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "--trace: a plan's trace draws one step" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model, hardware, plan, seq, framework", [
    # Megatron-Core's overlapped tensor-parallel collectives: the trace ran the stages' un-overlapped times and
    # ended at 7.72 s of a 6.10 s step (Llama 3 70B, 64 H100s); PyTorch's eager ring (context parallel): 1.083 s
    # of 1.051 s (Llama 3 8B, 16 H100s); the combined 1F1B schedule's hidden all-to-alls: 1.326 s of 1.314 s
    # (Mixtral, 32 H100s)
    ("llama-2-13b", "dgx-h100x8", ParallelPlan(tp=8, pp=4, dp=2, sequence_parallel=True, global_batch=64), 4096,
     "megatron-core"),
    ("llama-3-8b", "dgx-h100x2", ParallelPlan(tp=2, cp=2, dp=4, fsdp=True, global_batch=16), 8192, "fsdp2"),
])
def test_an_overlapped_step_is_drawn_as_it_was_scheduled(model: str, hardware: str, plan: ParallelPlan, seq: int,
                                                          framework: str) -> None:
    res = evaluate_plan(model, load_hardware(hardware), plan, train=True, seq=seq, framework=framework)
    tracks = _tracks(plan_to_chrome_trace(res))
    end = max(e for evs in tracks.values() for _, e, _, _ in evs)
    assert end == pytest.approx(res.latency_s, rel=1e-9)
    passes = [x for s in range(plan.pp) for x in tracks[(s, 0)] if x[3] in ("forward", "backward")]
    assert len(passes) == 2 * plan.microbatches * plan.pp
    for evs in tracks.values():  # still no overlap within a track: the hidden collectives are on their own
        for (_, e0, _, _), (s1, _, _, _) in zip(evs, evs[1:], strict=False):
            assert s1 >= e0 - 1e-9


def test_the_combined_1f1b_schedule_is_drawn_as_it_was_scheduled() -> None:
    plan = ParallelPlan(pp=4, dp=8, ep=8, interleave=2, schedule="interleaved", global_batch=64, moe_a2a_overlap=True)
    res = evaluate_plan("mixtral-8x7b", load_hardware("dgx-h100x4"), plan, train=True, seq=4096,
                        framework="megatron-core")
    assert res.extra["a2a_overlap_hidden_s"] > 0
    end = max(e for evs in _tracks(plan_to_chrome_trace(res)).values() for _, e, _, _ in evs)
    assert end == pytest.approx(res.latency_s, rel=1e-9)

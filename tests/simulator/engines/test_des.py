"""The discrete-event engine: parity with the analytical engine, overlap, launch limits, links, trace, CLI."""

from __future__ import annotations

import json
import sys
from itertools import pairwise
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import h100, toy_gpu  # noqa: E402

from hwmodels.spec import LinkSpec, SystemSpec  # noqa: E402
from simulator import EvalOptions, evaluate, simulate  # noqa: E402
from simulator.cli import main  # noqa: E402
from simulator.engines.discrete_event import LINK_TRACK, ScheduledOpCost  # noqa: E402
from simulator.report.trace import HOST_PID, report_to_chrome_trace  # noqa: E402
from workloads.analysis import critical_path  # noqa: E402
from workloads.ir import GraphBuilder, OpGraph  # noqa: E402
from workloads.zoo import build_model  # noqa: E402


def chain(batch: int = 512, d: int = 1024, h: int = 4096) -> OpGraph:
    """matmul -> gelu -> reshape (a view) -> matmul -> residual add: a pure chain."""
    b = GraphBuilder("chain", dtype="bf16")
    x = b.input("x", (batch, d))
    w1 = b.weight("w1", (d, h))
    w2 = b.weight("w2", (h, d))
    y = b.op("matmul", [x, w1], name="up")
    y = b.op("elementwise", [y], name="act", op="gelu")
    y = b.op("reshape", [y], name="flat", shape=(batch, h))
    y = b.op("matmul", [y, w2], name="down")
    b.op("elementwise", [y, x], name="residual", op="add")
    return b.build()


def two_branches(batch: int = 2048, d: int = 2048) -> OpGraph:
    """pre -> (a1 -> a2 | b1) -> join -> post: two independent branches between a shared prefix and suffix."""
    b = GraphBuilder("branches", dtype="bf16")
    x = b.input("x", (batch, d))
    wa1, wa2, wb = (b.weight(n, (d, d)) for n in ("wa1", "wa2", "wb"))
    p = b.op("elementwise", [x], name="pre", op="relu")
    a = b.op("matmul", [p, wa1], name="a1")
    a = b.op("matmul", [a, wa2], name="a2")
    c = b.op("matmul", [p, wb], name="b1")
    j = b.op("elementwise", [a, c], name="join", op="add")
    b.op("elementwise", [j], name="post", op="relu")
    return b.build()


def times(report) -> dict[str, float]:
    return {r.name: r.time_s for r in report.records}


def check_schedule(graph: OpGraph, report, streams: int) -> None:
    """Invariants of any schedule: dependencies, stream count, host launches in order and one at a time."""
    recs = {r.name: r for r in report.records}
    for op in graph:
        r = recs[op.name]
        assert isinstance(r, ScheduledOpCost)
        assert r.end_s == pytest.approx(r.start_s + r.time_s, rel=1e-12, abs=1e-18)
        assert r.start_s >= r.launch_start_s
        for p in graph.predecessors(op.name):
            assert r.start_s >= recs[p].end_s, (p, op.name)
    edges = sorted((t, +1 if k == "s" else -1) for r in report.records if r.track.startswith("stream")
                   and r.time_s > 0 and not r.fused_into for t, k in ((r.start_s, "s"), (r.end_s, "e")))
    busy = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # ends before starts at the same instant
        busy += step
        peak = max(peak, busy)
    assert peak <= streams
    launches = [r for r in report.records if r.kernels > 0 and not r.fused_into]
    for prev, cur in pairwise(launches):
        assert cur.launch_start_s == pytest.approx(prev.launch_end_s, rel=1e-12, abs=1e-18)
    assert report.latency_s == max((r.end_s for r in report.records), default=0.0)


# (1) one stream reproduces the analytical engine ---------------------------------------------


@pytest.mark.parametrize("opts", [EvalOptions(), EvalOptions(cuda_graphs=True), EvalOptions(fusion=True)])
def test_chain_on_one_stream_equals_evaluate(opts):
    g = chain()
    ref = evaluate(g, h100(), opts)
    r = simulate(g, h100(), opts, streams=1)
    assert r.latency_s == pytest.approx(ref.latency_s, rel=1e-12)
    assert r.latency_s == pytest.approx(sum(o.time_s for o in r.records), rel=1e-12)
    assert r.provenance["engine"] == "des" and r.provenance["streams"] == 1
    assert [o.name for o in r.records] == [o.name for o in ref.records]
    # back to back: every op starts where the previous one ended
    for prev, cur in pairwise(r.records):
        assert cur.start_s == pytest.approx(prev.end_s, rel=1e-12)
    # energy: the same dynamic energy per op, idle power over each op's time, and sums that add up
    idle_w = h100().power.idle_w
    for a, b in zip(r.records, ref.records, strict=True):
        assert a.dynamic_energy_j == b.dynamic_energy_j and a.time_s == b.time_s
        assert a.static_energy_j == pytest.approx(idle_w * a.time_s, rel=1e-9)
        assert a.static_energy_j == pytest.approx(b.static_energy_j, rel=1e-9)
    assert r.energy_j == pytest.approx(sum(o.energy_j for o in r.records), rel=1e-12)
    assert r.energy_j == pytest.approx(ref.energy_j, rel=1e-12)
    assert r.totals.static_energy_j == pytest.approx(h100().power.idle_w * r.latency_s, rel=1e-12)
    check_schedule(g, r, 1)


def test_fused_op_runs_on_its_producers_stream_right_after_it():
    g = chain()
    one = simulate(g, h100(), EvalOptions(fusion=True), streams=1)
    # one launch per kernel; the fused ops extend their producers' kernels
    assert one.latency_s == pytest.approx(sum(o.time_s for o in one.records), rel=1e-12)
    assert [o.launch_start_s for o in one.records if o.kernels] == [0.0, h100().efficiency.launch_overhead_s]
    r = simulate(g, h100(), EvalOptions(fusion=True), streams=2)
    act, up = r.op("act"), r.op("up")
    assert act.fused_into == "up" and act.kernels == 0
    assert act.track == up.track and act.start_s == up.end_s
    check_schedule(g, r, 2)


# (2) two branches on two streams --------------------------------------------------------------


def test_two_branches_of_full_grid_gemms_do_not_overlap_on_two_streams():
    # each branch GEMM fills the device for whole waves (1024 CTAs, 1 per SM, 4 SMs: 256 waves), so
    # a second stream cannot run b1 beside a1: b1 waits for the SMs (docs/des.md), and the makespan
    # is the one-stream sum; b1, ready before a2, gets the SMs first when a1 ends
    g = two_branches()
    dev = toy_gpu()
    ref = evaluate(g, dev)
    t = times(ref)
    launch = dev.efficiency.launch_overhead_s
    assert min(t.values()) >= launch  # every op at least its launch floor: the host never waits...
    assert t["a1"] > 3 * launch  # ...and the branches are long enough for the host to stay ahead
    a1 = ref.op("a1")
    assert a1.ctas == 1024 and a1.ctas_per_sm == 1 and a1.waves == 256.0
    r2 = simulate(g, dev, streams=2)
    assert r2.latency_s == pytest.approx(sum(t.values()), rel=1e-12)
    assert r2.op("a1").track != r2.op("b1").track
    assert r2.op("b1").ready_s == pytest.approx(t["pre"], rel=1e-12)  # ready beside a1...
    assert r2.op("b1").start_s == pytest.approx(r2.op("a1").end_s, rel=1e-12)  # ...runs after it
    assert r2.op("a2").start_s == pytest.approx(r2.op("b1").end_s, rel=1e-12)
    assert r2.provenance["contention"]["limited_s"]["waiting"] > 0
    r1 = simulate(g, dev, streams=1)
    assert r1.latency_s == pytest.approx(sum(t.values()), rel=1e-12)
    # idle power is paid once over the makespan, not once per stream
    assert r2.totals.static_energy_j == pytest.approx(dev.power.idle_w * r2.latency_s, rel=1e-12)
    assert r2.energy_j == pytest.approx(sum(o.energy_j for o in r2.records), rel=1e-12)
    assert not any("overlap" in w for w in r2.warnings) and not any("overlap" in w for w in r1.warnings)
    check_schedule(g, r2, 2)


# (3) zoo graphs: more streams never slower, never faster than the critical path -----------------


@pytest.mark.parametrize("model", ["inception_v3", "resnet50"])
def test_streams_between_critical_path_and_one_stream(model):
    g = build_model(model)
    dev = h100()
    one = simulate(g, dev, streams=1)
    t = times(one)
    _, cp = critical_path(g, weight=lambda op: t[op.name])
    assert one.latency_s == pytest.approx(sum(t.values()), rel=1e-12)
    for s in (2, 4):
        r = simulate(g, dev, streams=s)
        assert r.latency_s <= one.latency_s * (1 + 1e-12)
        assert r.latency_s >= cp * (1 - 1e-12)
        check_schedule(g, r, s)
    if model == "inception_v3":  # parallel branches: a second stream must help
        assert simulate(g, dev, streams=2).latency_s < one.latency_s


# (4) launch-bound work ----------------------------------------------------------------------


def tiny_chain(n: int) -> OpGraph:
    b = GraphBuilder("tiny-chain", dtype="bf16")
    y = b.input("x", (16,))
    for i in range(n):
        y = b.op("elementwise", [y], name=f"relu{i}", op="relu")
    return b.build()


def tiny_fan(n: int) -> OpGraph:
    b = GraphBuilder("tiny-fan", dtype="bf16")
    x = b.input("x", (16,))
    for i in range(n):
        b.op("elementwise", [x], name=f"relu{i}", op="relu")
    return b.build()


def test_tiny_chain_is_launch_bound():
    dev = toy_gpu()  # launch 2 us, graph launch 1 us; a 16-element relu takes far less
    n = 10
    r = simulate(tiny_chain(n), dev)
    assert r.latency_s == pytest.approx(n * 2e-6, rel=1e-12)
    assert [o.launch_start_s for o in r.records] == pytest.approx([i * 2e-6 for i in range(n)], rel=1e-12)
    graphed = simulate(tiny_chain(n), dev, EvalOptions(cuda_graphs=True))
    assert graphed.latency_s == pytest.approx(n * 1e-6, rel=1e-12)


def test_independent_tiny_kernels_are_limited_by_the_host_not_the_streams():
    dev = toy_gpu()
    n = 8
    g = tiny_fan(n)
    r = simulate(g, dev, streams=4)
    assert r.latency_s == pytest.approx(n * 2e-6, rel=1e-12)  # the host launches one kernel per 2 us
    _, cp = critical_path(g, weight=lambda op: r.op(op.name).time_s)
    assert cp == pytest.approx(2e-6)  # whereas the dependencies alone would allow 2 us
    check_schedule(g, r, 4)


# collectives on the link ----------------------------------------------------------------------


def test_collective_overlaps_compute_on_the_link():
    dev = h100()
    fabric = LinkSpec("nvswitch", "nvlink4", 450e9, 3e-6)
    system = SystemSpec("test-node", "8 test GPUs", dev, 8, fabric)
    b = GraphBuilder("overlap", dtype="bf16")
    x = b.input("x", (4096, 4096))
    g_in = b.input("grad", (64 * 2**20,))
    w = b.weight("w", (4096, 4096))
    y = b.op("matmul", [x, w], name="mm")
    s = b.op("all_reduce", [g_in], name="ar", group_size=8)
    b.op("elementwise", [y], name="act", op="relu")
    b.op("elementwise", [s], name="scale", op="neg")
    g = b.build()
    ref = evaluate(g, system)
    t = times(ref)
    launch = dev.efficiency.launch_overhead_s
    r = simulate(g, system, streams=1)
    assert r.op("ar").track == LINK_TRACK and r.op("mm").track == "stream 0"
    assert r.op("ar").start_s == pytest.approx(launch, rel=1e-12)  # launched right after mm
    assert r.op("ar").start_s < r.op("mm").end_s  # overlaps the matmul
    # program order mm, ar, act, scale: act follows mm on the stream; scale waits for the all-reduce
    end_act = t["mm"] + t["act"]
    expected = max(end_act, launch + t["ar"]) + t["scale"]
    assert r.latency_s == pytest.approx(expected, rel=1e-12)
    assert r.latency_s < ref.latency_s
    check_schedule(g, r, 1)


# (5) determinism, options and errors ----------------------------------------------------------


def test_same_inputs_give_identical_json_and_trace():
    g = build_model("inception_v3")
    a = simulate(g, h100(), streams=2)
    b = simulate(g, h100(), streams=2)
    assert a.to_json() == b.to_json()
    ta = json.dumps(report_to_chrome_trace(a), sort_keys=True)
    assert ta == json.dumps(report_to_chrome_trace(b), sort_keys=True)
    d = json.loads(a.to_json())
    assert d["provenance"]["engine"] == "des" and d["provenance"]["streams"] == 2
    assert {"start_s", "end_s", "track"} <= set(d["ops"][0])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_streams_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="streams: not a positive integer"):
        simulate(tiny_chain(2), toy_gpu(), streams=bad)


def test_trace_option_logs_the_events(caplog):
    with caplog.at_level("DEBUG", logger="simulator.engines.discrete_event"):
        simulate(tiny_chain(3), toy_gpu(), trace=True)
    msgs = [m for m in caplog.messages if m.startswith("t=")]
    assert len(msgs) == 9 and "launch relu0" in msgs[0]  # launch, start, end per op


# (6) the Chrome trace -------------------------------------------------------------------------


def test_chrome_trace_has_one_event_per_op_in_microseconds():
    g = two_branches()
    r = simulate(g, toy_gpu(), EvalOptions(), streams=2)
    tr = json.loads(json.dumps(report_to_chrome_trace(r)))
    ops = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["cat"] != "launch"]
    assert [e["name"] for e in ops] == [o.name for o in r.records]
    for e, o in zip(ops, r.records, strict=True):
        assert e["ts"] == pytest.approx(o.start_s * 1e6, rel=1e-12)
        assert e["dur"] == pytest.approx(o.time_s * 1e6, rel=1e-12)
    launches = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["cat"] == "launch"]
    assert len(launches) == len(r.records) and all(e["pid"] == HOST_PID for e in launches)
    assert launches[1]["ts"] == pytest.approx(toy_gpu().efficiency.launch_overhead_s * 1e6)
    names = {e["args"]["name"] for e in tr["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"stream 0", "stream 1", "launch"}


def test_chrome_trace_of_an_analytical_report_is_back_to_back():
    g = chain()
    r = evaluate(g, h100())
    ev = [e for e in report_to_chrome_trace(r)["traceEvents"] if e["ph"] == "X"]
    assert len(ev) == len(r.records)
    t = 0.0
    for e, o in zip(ev, r.records, strict=True):
        assert e["ts"] == pytest.approx(t * 1e6, rel=1e-12)
        t += o.time_s


# CLI --------------------------------------------------------------------------------------------


def test_predict_with_the_des_engine(capsys, tmp_path):
    path = tmp_path / "trace.json"
    argv = ["predict", "resnet18", "--hardware", "h100-sxm5-80gb", "--engine", "des", "--streams", "2",
            "--json", "--trace", str(path)]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["provenance"]["engine"] == "des" and out["provenance"]["streams"] == 2
    tr = json.loads(path.read_text())
    ops = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["cat"] != "launch"]
    assert len(ops) == len(out["ops"])
    assert main(["predict", "resnet18", "--hardware", "h100-sxm5-80gb", "--engine", "des"]) == 0
    assert "discrete-event engine, 1 stream(s)" in capsys.readouterr().out


def test_predict_streams_needs_the_des_engine(capsys):
    rc = main(["predict", "resnet18", "--hardware", "h100-sxm5-80gb", "--streams", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "--streams" in err and "--engine des" in err and "Traceback" not in err


def test_a_parallel_plan_is_a_located_error_not_a_traceback():
    from simulator.hardware import load_hardware
    from workloads.parallel import ParallelPlan
    from workloads.resolve import load_workload

    g = load_workload("gpt2", phase="decode", context=128)
    with pytest.raises(ValueError, match=r"simulate: options\.plan: .*evaluate_plan"):
        simulate(g, load_hardware("dgx-h100"), EvalOptions(plan=ParallelPlan(tp=2)))

"""`nodeperf realtime`: scenario schema and its located errors, costing by the analytical engine,
determinism with a seed, the CLI's JSON and trace, and the bound beside the simulated maximum."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from simulator.cli.main import main
from simulator.realtime.scenario import ScenarioError, load_scenario
from simulator.realtime.simulate import run_realtime

SCENARIO = """
name = "small"
frames = 300

[variables.objects]
distribution = "poisson"
mean = 6
min = 1
max = 16
produced_by = "detector"

[[tasks]]
name = "camera"
model = "elementwise:numel=1048576,op=mul"
device = "gpu"
rate = "30 Hz"
jitter = "2 ms"
deadline = "5 ms"
priority = 5

[[tasks]]
name = "detector"
model = "resnet18"
seq = 128
device = "gpu"
after = ["camera"]
deadline = "30 ms"
priority = 4

[[tasks]]
name = "tracker"
model = "gemm:m={objects*8},n=256,k=256"
device = "gpu"
after = ["detector"]
deadline = "10 ms"
priority = 3

[[tasks]]
name = "planner"
model = "gemm:m=512,n=512,k=2048"
device = "gpu"
rate = "10 Hz"
after = ["tracker"]
deadline = "50 ms"
priority = 2

[[chains]]
name = "cam"
tasks = ["camera", "detector", "tracker", "planner"]
deadline = "200 ms"
"""


@pytest.fixture()
def scenario(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO)
    return p


def _bad(tmp_path, text: str) -> str:
    p = tmp_path / "bad.toml"
    p.write_text(textwrap.dedent(text))
    with pytest.raises(ScenarioError) as exc:
        r = run_realtime(p, "l4", frames=10)
        del r
    return str(exc.value)


def test_runs_on_a_single_catalog_device_and_the_bound_covers_the_simulation(scenario):
    r = run_realtime(scenario, "l4", seed=3)
    by = {t.name: t for t in r.tasks}
    assert [d.name for d in r.devices] == ["gpu"] and r.devices[0].spec == "l4"
    assert by["camera"].stats.count == 300 and by["detector"].stats.count == 300 and by["tracker"].stats.count == 300
    assert by["planner"].stats.count == 100  # 10 Hz over 300 frames of 30 Hz
    for t in [*r.tasks, *r.chains]:
        assert math.isfinite(t.wcrt_bound_s)
        assert 0 < t.stats.max_s <= t.wcrt_bound_s
        assert t.stats.p50_s <= t.stats.p99_s <= t.stats.p999_s <= t.stats.max_s
    assert r.chains[0].stats.count > 90  # the planner's first job may come before any track
    assert 0 < r.devices[0].utilisation <= r.devices[0].utilisation_wcet + 1e-12


def test_job_kernels_are_the_analytical_engines(scenario):
    """A job's kernels sum to the analytical engine's latency of the same graph (parity), per object count."""
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import evaluate
    from simulator.realtime.costing import cost_scenario, resolve_node
    from workloads.resolve import load_workload

    scn = load_scenario(scenario)
    costs = cost_scenario(scn, resolve_node("l4"))
    l4 = load_device("l4")
    assert costs["tracker"].support == {"objects": tuple(range(1, 17))}
    for n in (1, 7, 16):
        want = evaluate(load_workload(f"gemm:m={8 * n},n=256,k=256"), l4).latency_s
        assert costs["tracker"].variants[(n,)].work_s == pytest.approx(want, rel=1e-12)
    det = evaluate(load_workload("resnet18", seq=128), l4)
    assert costs["detector"].wcet_s == pytest.approx(det.latency_s, rel=1e-12)
    assert len(costs["detector"].variants[()].segments) == sum(1 for r in det.records if r.time_s > 0)
    assert costs["detector"].longest_kernel_s == pytest.approx(max(r.time_s for r in det.records))


def test_same_seed_same_json_other_seed_differs(scenario):
    a = run_realtime(scenario, "l4", seed=7).to_json()
    b = run_realtime(scenario, "l4", seed=7).to_json()
    c = run_realtime(scenario, "l4", seed=8).to_json()
    assert a == b
    assert a != c


def test_cli_json_has_tasks_chains_and_utilisation(scenario, capsys):
    assert main(["realtime", str(scenario), "--hardware", "l4", "--frames", "60", "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in out["tasks"]] == ["camera", "detector", "tracker", "planner"]
    assert [c["name"] for c in out["chains"]] == ["cam"]
    for entry in (*out["tasks"], *out["chains"]):
        for key in ("name", "p50_s", "p99_s", "max_s", "deadline_s", "deadline_misses", "wcrt_bound_s"):
            assert key in entry
        assert entry["max_s"] <= entry["wcrt_bound_s"]
    assert set(out["utilisation"]) == {"gpu"} and 0 < out["utilisation"]["gpu"] < 1
    assert out["frames"] == 60 and out["seed"] == 1 and out["stopped_by"] == "frames"


def test_cli_table_and_trace(scenario, tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["realtime", str(scenario), "--hardware", "l4", "--frames", "30", "--trace", str(trace)]) == 0
    text = capsys.readouterr().out
    assert "bound" in text and "deadline" in text and "device gpu (l4): utilisation" in text
    ev = json.loads(trace.read_text())["traceEvents"]
    runs = [e for e in ev if e["ph"] == "X"]
    assert {e["cat"] for e in runs} == {"camera", "detector", "tracker", "planner"}
    assert all(e["dur"] > 0 for e in runs)
    # runs on one device never overlap
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in runs)
    assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:], strict=False))


def test_sporadic_task_interarrivals_stay_in_their_range(tmp_path):
    p = tmp_path / "sp.toml"
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "tick"
        model = "copy:bytes=4096"
        device = "gpu"
        rate = "100 Hz"
        deadline = "10 ms"
        [[tasks]]
        name = "event"
        model = "copy:bytes=4096"
        device = "gpu"
        min_interarrival = "20 ms"
        max_interarrival = "60 ms"
        deadline = "10 ms"
    """))
    r = run_realtime(p, "l4", frames=4000)  # 40 s of the 100 Hz tick
    ev = next(t for t in r.tasks if t.name == "event")
    # uniform gaps in [20, 60] ms, mean 40 ms: 40 s / 40 ms = 1000 jobs, within 1000 +- 4 sigma (sd 11.5 ms per gap)
    assert 40.0 / 0.060 <= ev.released <= 40.0 / 0.020 + 1
    assert abs(ev.released - 1000) < 4 * 1000 ** 0.5 * 11.55 / 40


def test_a_time_limit_ends_the_run_and_says_so(scenario):
    r = run_realtime(scenario, "l4", frames=20000, time_limit_s=1e-9)
    assert r.stopped_by == "time limit"
    assert any(line.startswith("stopped: the wall-clock limit") for line in r.report_lines)


def test_overload_reported_and_simulated(tmp_path):
    p = tmp_path / "over.toml"
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "big"
        model = "gemm:m=8192,n=8192,k=8192"
        device = "gpu"
        rate = "60 Hz"
        deadline = "16 ms"
    """))
    r = run_realtime(p, "l4", frames=50)
    assert r.devices[0].overloaded and r.devices[0].utilisation_wcet > 1
    assert any(line.startswith("overload: device gpu") for line in r.report_lines)
    t = r.tasks[0]
    assert t.stats.count == 50 and t.stats.deadline_misses > 0 and math.isinf(t.wcrt_bound_s)
    assert r.to_dict()["tasks"][0]["wcrt_bound_s"] is None and r.to_dict()["tasks"][0]["bounded"] is False


def test_a_backlog_that_never_drains_stops_the_run_and_says_so(tmp_path, monkeypatch):
    import simulator.realtime.simulate as sim

    p = tmp_path / "over.toml"
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "big"
        model = "gemm:m=8192,n=8192,k=8192"
        device = "gpu"
        rate = "60 Hz"
        deadline = "16 ms"
    """))
    monkeypatch.setattr(sim, "MAX_BACKLOG", 5)  # the overloaded queue passes 5 jobs long before 5,000 frames
    r = run_realtime(p, "l4", frames=5000)
    assert r.stopped_by == "backlog" and r.to_dict()["stopped_by"] == "backlog"
    assert any(line.startswith("stopped: a device's ready queue passed 5 jobs") for line in r.report_lines)
    assert 0 < r.tasks[0].stats.count < 5000


# ---------------------------------------------------------------------------------------------
# bad input: located errors, exit code 2 from the CLI


def test_dependency_cycle(tmp_path):
    msg = _bad(tmp_path, """
        [[tasks]]
        name = "a"
        model = "copy:bytes=64"
        device = "gpu"
        rate = "10 Hz"
        after = ["c"]
        deadline = "10 ms"
        [[tasks]]
        name = "b"
        model = "copy:bytes=64"
        device = "gpu"
        after = ["a"]
        deadline = "10 ms"
        [[tasks]]
        name = "c"
        model = "copy:bytes=64"
        device = "gpu"
        after = ["b"]
        deadline = "10 ms"
    """)
    assert "bad.toml: tasks.a.after: dependency cycle; got a -> b -> c -> a; expected a DAG" in msg


def test_unknown_device_deadline_zero_and_typos_reported_together(tmp_path):
    msg = _bad(tmp_path, """
        [[tasks]]
        name = "a"
        model = "copy:bytes=64"
        device = "gpu"
        rate = "10 Hz"
        deadline = "0 ms"
        [[tasks]]
        name = "b"
        model = "copy:bytes=64"
        device = "gpu"
        after = ["aa"]
        deadlin = "5 ms"
    """)
    assert "3 problems" in msg or "4 problems" in msg
    assert "bad.toml: tasks.a.deadline: out of range; got '0 ms'; expected a value > 0" in msg
    assert "bad.toml: tasks.b.deadlin: unknown key; got 'deadlin'" in msg and "did you mean 'deadline'?" in msg
    assert "bad.toml: tasks.b.after: unknown task; got 'aa'; expected one of a, b; did you mean 'a'?" in msg


def test_task_on_a_device_the_node_lacks(tmp_path):
    msg = _bad(tmp_path, """
        [[tasks]]
        name = "a"
        model = "copy:bytes=64"
        device = "dla0"
        rate = "10 Hz"
        deadline = "10 ms"
    """)
    assert msg.endswith("bad.toml: tasks.a.device: the node 'l4' has no device 'dla0'; got 'dla0'; expected one of "
                        "gpu, l4 or \"auto\"")


def test_an_op_the_device_cannot_run(tmp_path, capsys):
    p = tmp_path / "dla.toml"
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "planner"
        model = "gpt2"
        seq = 32
        dtype = "fp16"
        device = "dla0"
        rate = "10 Hz"
        deadline = "100 ms"
    """))
    assert main(["realtime", str(p), "--hardware", "jetson-agx-orin-64gb", "--frames", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"nodeperf: error: {p}: tasks.planner.device: dla0 (orin-dla) cannot run 'gpt2'; got ")
    assert "embedding" in err


def test_variable_must_be_produced_upstream(tmp_path):
    msg = _bad(tmp_path, """
        [variables.n]
        distribution = "uniform"
        low = 1
        high = 4
        produced_by = "b"
        [[tasks]]
        name = "a"
        model = "gemm:m={n},n=64,k=64"
        device = "gpu"
        rate = "10 Hz"
        deadline = "10 ms"
        [[tasks]]
        name = "b"
        model = "copy:bytes=64"
        device = "gpu"
        rate = "10 Hz"
        deadline = "10 ms"
    """)
    assert "bad.toml: tasks.a: variable {n} is produced by 'b', which is not upstream of 'a'" in msg


def test_a_bad_variable_is_one_problem_not_also_an_unknown_one_where_used(tmp_path):
    # mean = nan had also reported "tasks.a: unknown variable {n}" for the variable declared just above
    msg = _bad(tmp_path, """
        [variables.n]
        distribution = "poisson"
        mean = nan
        produced_by = "a"
        [[tasks]]
        name = "a"
        model = "copy:bytes=64"
        device = "gpu"
        rate = "10 Hz"
        deadline = "10 ms"
        [[tasks]]
        name = "b"
        model = "gemm:m={n},n=64,k=64"
        device = "gpu"
        after = ["a"]
        deadline = "10 ms"
    """)
    assert "bad.toml: variables.n.mean: not a positive number; got nan" in msg
    assert "unknown variable" not in msg and "problems" not in msg


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, scenario, capsys):
    assert main(["realtime", str(tmp_path / "missing.toml"), "--hardware", "l4"]) == 2
    assert "missing.toml: file not found" in capsys.readouterr().err
    assert main(["realtime", str(scenario), "--hardware", "l44"]) == 2
    err = capsys.readouterr().err
    assert "l44" in err and err.count("\n") == 1
    assert main(["realtime", str(scenario), "--hardware", "l4", "--place", "trackr=gpu"]) == 2
    assert "--place trackr: unknown task; got 'trackr'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse's own usage errors exit 2 as well
        main(["realtime", str(scenario), "--hardware", "l4", "--frames", "0"])
    assert exc.value.code == 2
    assert "argument --frames: got 0; expected a positive integer" in capsys.readouterr().err
    assert main(["realtime", str(scenario), "--hardware", "jetson-agx-orin-64gb@31w"]) == 2
    assert "did you mean '30w'?" in capsys.readouterr().err


def test_cli_errors_follow_the_bad_input_contract(tmp_path, capsys):
    from tests.bad_input.contract import one_line, several

    p = tmp_path / "cyc.toml"
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "a"
        model = "copy:bytes=64"
        device = "gpu"
        rate = "10 Hz"
        after = ["b"]
        deadline = "10 ms"
        [[tasks]]
        name = "b"
        model = "copy:bytes=64"
        device = "gpu"
        after = ["a"]
        deadline = "10 ms"
    """))
    rc = main(["realtime", str(p), "--hardware", "l4"])
    one_line(rc, capsys.readouterr().err, "cyc.toml: tasks.a.after: dependency cycle; got a -> b -> a")
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "a"
        model = "copy:bytes=64"
        device = "gpu"
        rate = "-10 Hz"
        deadline = "-1 ms"
        prio = 3
    """))
    rc = main(["realtime", str(p), "--hardware", "l4"])
    lines = several(rc, capsys.readouterr().err, 3, "cyc.toml", each_names_where=True)
    assert any("tasks.a.prio: unknown key; got 'prio'" in ln and "did you mean" in ln for ln in lines)
    assert any("tasks.a.rate: out of range; got '-10 Hz'; expected a value > 0" in ln for ln in lines)
    assert any("tasks.a.deadline: out of range; got '-1 ms'" in ln for ln in lines)


def test_auto_placement_balances_and_skips_devices_that_cannot_run_the_model(tmp_path):
    from simulator.realtime.costing import cost_scenario, resolve_node

    p = tmp_path / "auto.toml"
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "planner"
        model = "gpt2"
        seq = 32
        dtype = "fp16"
        device = "auto"
        rate = "10 Hz"
        deadline = "100 ms"
        [[tasks]]
        name = "det_a"
        model = "resnet18"
        seq = 128
        dtype = "fp16"
        device = "auto"
        rate = "30 Hz"
        deadline = "33 ms"
        [[tasks]]
        name = "det_b"
        model = "resnet18"
        seq = 128
        dtype = "fp16"
        device = "auto"
        rate = "30 Hz"
        deadline = "33 ms"
    """))
    node = resolve_node("jetson-agx-orin-64gb")
    costs = cost_scenario(load_scenario(p), node)
    # the DLAs have no embedding or attention: the planner goes to the GPU or the CPU
    assert costs["planner"].device in ("gpu", "cpu")
    # two identical detectors never share a device while an idle one can run them
    assert costs["det_a"].device != costs["det_b"].device
    # worst-fit: the heaviest task first, on the device that keeps the largest utilisation smallest
    util = {d.name: 0.0 for d in node.devices}
    for t in ("det_a", "det_b", "planner"):
        util[costs[t].device] += costs[t].wcet_s / load_scenario(p).task(t).period_s
    assert max(util.values()) < 1


def test_a_devices_overlay_applies_to_that_device_only(capsys):
    from hwmodels.catalog import CATALOG_DIR
    from simulator.realtime.costing import apply_node_overlay, resolve_node

    node = resolve_node("jetson-agx-orin-64gb")
    mode = f"{CATALOG_DIR}/power_modes/jetson-agx-orin-64gb/15w.toml"
    got = apply_node_overlay(node, mode)
    assert got.device("gpu").spec.power.tdp_w == 15.0
    assert got.device("dla0").spec == node.device("dla0").spec and got.device("cpu").spec == node.device("cpu").spec
    # --hardware NAME@MODE sets every device that has the mode: the GPU and both DLAs, not the CPU
    at = resolve_node("jetson-agx-orin-64gb@15w")
    assert at.device("gpu").spec.power.tdp_w == 15.0
    assert at.device("dla0").spec.clock.boost_hz < node.device("dla0").spec.clock.boost_hz
    assert at.device("cpu").spec == node.device("cpu").spec


def test_conv_layout_option_reaches_the_costing(tmp_path):
    """options.conv_layout = "nchw": the detector's fp16 convolutions pay cuDNN's layout transforms; a bad
    value is one located error."""
    from simulator.realtime.costing import cost_scenario, resolve_node

    text = SCENARIO.replace('model = "resnet18"', 'model = "resnet18"\ndtype = "fp16"')
    plain = tmp_path / "plain.toml"
    plain.write_text(text)
    nchw = tmp_path / "nchw.toml"
    nchw.write_text(text.replace("[variables.objects]", '[options]\nconv_layout = "nchw"\n\n[variables.objects]'))
    node = resolve_node("l4")
    a = cost_scenario(load_scenario(plain), node)["detector"].wcet_s
    b = cost_scenario(load_scenario(nchw), node)["detector"].wcet_s
    assert b > a
    msg = _bad(tmp_path, SCENARIO.replace("[variables.objects]", '[options]\nconv_layout = "NHCW"\n\n[variables.objects]'))
    assert "options.conv_layout" in msg and "expected one of nhwc, nchw" in msg and "did you mean" in msg


def test_an_unknown_option_is_located_with_its_near_match(tmp_path):
    msg = _bad(tmp_path, SCENARIO.replace("[variables.objects]", '[options]\nfuson = true\n\n[variables.objects]'))
    assert "options.fuson: unknown option; got 'fuson'; expected one of fusion, epilogue_fusion, " in msg, msg
    assert msg.endswith("; did you mean 'fusion'?"), msg

"""Running sweeps: every stored row equals an independent `evaluate` of its point, resuming and extending
stores, error rows, schedulers, Parquet, refused stores, systolic parity and Pareto fronts by brute force."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hwmodels.paths import with_overrides
from simulator import EvalOptions, evaluate
from simulator.hardware import load_hardware
from simulator.sweep import (
    StoreError,
    SweepError,
    load_experiment,
    load_results,
    pareto_front,
    run_sweep,
)
from simulator.sweep.experiment import ExperimentError
from workloads.resolve import load_workload

REPO = Path(__file__).resolve().parents[3]
H100_BF16 = 989.4e12  # catalog value of h100-sxm5-80gb (NVIDIA H100 datasheet)

MODEL = """
schema = "nodeperf.experiment/1"
name = "{name}"
metrics = ["latency_s", "energy_j", "throughput_per_s", "memory_bytes", "power_w"]
[workload]
model = "gpt2"
phase = "decode"
context = 256
[hardware]
name = "h100-sxm5-80gb"
[axes.workload]
batch = {batch}
[axes.hardware]
memory.hbm.read_bandwidth_bytes_per_s = ["2 TB/s", "4 TB/s"]
{extra}
"""


def _write(tmp_path: Path, name: str = "m", batch: str = "[1, 4]", extra: str = "") -> Path:
    f = tmp_path / f"{name}.toml"
    f.write_text(MODEL.format(name=name, batch=batch, extra=extra), encoding="utf-8")
    return f


def _canon_hash(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def test_rows_equal_an_independent_evaluate_per_point(tmp_path: Path) -> None:
    exp = _write(tmp_path, extra='"compute.tensor_flops_per_s.bf16" = ["400 TFLOP/s", "1 PFLOP/s"]')
    out = tmp_path / "r.sqlite"
    s = run_sweep(exp, out, scheduler="synchronous")
    assert (s.total, s.computed, s.reused, s.errors) == (8, 8, 0, 0)
    df = load_results(out)
    assert len(df) == 8 and df["point_key"].is_unique
    base = load_hardware("h100-sxm5-80gb")
    for row in df.itertuples(index=False):
        r = row._asdict()
        batch = int(row[df.columns.get_loc("workload.batch")])
        bw = row[df.columns.get_loc("hardware.memory.hbm.read_bandwidth_bytes_per_s")]
        tf = row[df.columns.get_loc("hardware.compute.tensor_flops_per_s.bf16")]
        g = load_workload("gpt2", phase="decode", batch=batch, context=256)
        spec = with_overrides(base, {"memory.hbm.read_bandwidth_bytes_per_s": bw,
                                     "compute.tensor_flops_per_s.bf16": tf})
        rep = evaluate(g, spec, EvalOptions())
        assert r["latency_s"] == pytest.approx(rep.totals.latency_s, rel=1e-12)
        assert r["energy_j"] == pytest.approx(rep.totals.energy_j, rel=1e-12)
        assert r["power_w"] == pytest.approx(rep.totals.avg_power_w, rel=1e-12)
        assert r["memory_bytes"] == rep.memory.required_bytes
        assert r["throughput_per_s"] == pytest.approx(batch / rep.totals.latency_s, rel=1e-12)  # decode: 1 token each
        assert r["provenance_sha256"] == _canon_hash(rep.provenance)
    # more bandwidth is never slower (same batch, same tensor peak)
    for (_, _tf), grp in df.groupby(["workload.batch", "hardware.compute.tensor_flops_per_s.bf16"]):
        g2 = grp.sort_values("hardware.memory.hbm.read_bandwidth_bytes_per_s")
        assert g2["latency_s"].is_monotonic_decreasing


@pytest.mark.parametrize("suffix", [".sqlite", ".parquet"])
def test_resume_and_extend_without_recomputing(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"r{suffix}"
    s1 = run_sweep(_write(tmp_path), out, scheduler="synchronous")
    assert (s1.total, s1.computed) == (4, 4)
    s2 = run_sweep(_write(tmp_path), out, scheduler="synchronous")
    assert (s2.computed, s2.reused) == (0, 4)
    # one more batch value: only its two points are new
    s3 = run_sweep(_write(tmp_path, batch="[1, 4, 8]"), out, scheduler="synchronous")
    assert (s3.total, s3.computed, s3.reused) == (6, 2, 4)
    # a new axis holding the base value finds the old points (their keys do not change)
    s4 = run_sweep(_write(tmp_path, batch="[1, 4, 8]",
                          extra=f'"compute.tensor_flops_per_s.bf16" = [{H100_BF16!r}, "500 TFLOP/s"]'),
                   out, scheduler="synchronous")
    assert (s4.total, s4.computed, s4.reused) == (12, 6, 6)
    df = load_results(out)
    assert len(df) == 12 and df["point_key"].is_unique
    # the reused rows got the new axis column filled with the value they were computed at
    assert set(df["hardware.compute.tensor_flops_per_s.bf16"]) == {H100_BF16, 500e12}
    if suffix == ".parquet":
        return
    conn = sqlite3.connect(out)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        idx = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'results_axes'").fetchone()[0]
        assert "workload.batch" in idx and "compute.tensor_flops_per_s.bf16" in idx
    finally:
        conn.close()


def test_failing_points_are_stored_with_their_error(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text("""
metrics = ["latency_s"]
[workload]
phase = "decode"
[hardware]
name = "a100-sxm4-80gb"
[axes.workload]
model = ["gpt2", "resnet50"]
""", encoding="utf-8")
    out = tmp_path / "e.sqlite"
    s = run_sweep(f, out, scheduler="synchronous")
    assert (s.total, s.computed, s.errors) == (2, 2, 1)
    df = load_results(out).set_index("workload.model")
    assert df.loc["gpt2", "latency_s"] > 0 and pd.isna(df.loc["gpt2", "error"])
    assert np.isnan(df.loc["resnet50", "latency_s"])
    assert "phase 'decode' not supported" in df.loc["resnet50", "error"]
    assert run_sweep(f, out, scheduler="synchronous").computed == 0  # an error is a result too


def test_threads_processes_and_parquet_give_the_same_rows(tmp_path: Path) -> None:
    exp = _write(tmp_path, batch="[1, 2, 4]")
    ref = load_results(_run(exp, tmp_path / "a.sqlite", "synchronous"))
    for sched, name in (("threads", "b.sqlite"), ("processes", "c.sqlite"), ("synchronous", "d.parquet")):
        other = load_results(_run(exp, tmp_path / name, sched, workers=2))
        m = ref.merge(other, on="point_key", suffixes=("", "_o"))
        assert len(m) == len(ref) == len(other) == 6
        for c in ("latency_s", "energy_j", "memory_bytes", "provenance_sha256", "workload.batch"):
            assert (m[c] == m[f"{c}_o"]).all(), (sched, c)
    # the Parquet store resumes too
    assert run_sweep(exp, tmp_path / "d.parquet", scheduler="synchronous").computed == 0


def _run(exp: Path, out: Path, sched: str, workers: int | None = None) -> Path:
    run_sweep(exp, out, scheduler=sched, workers=workers)
    return out


def test_foreign_stores_are_refused_untouched(tmp_path: Path) -> None:
    exp = _write(tmp_path)
    sysexp = tmp_path / "s.toml"
    sysexp.write_text(f"""
[workload]
topology = "{REPO / 'tests/hwmodels/data/parity_gemm.csv'}"
[systolic]
rows = 8
cols = 8
[axes.systolic]
dataflow = ["os", "ws"]
""", encoding="utf-8")
    store = tmp_path / "sys.sqlite"
    run_sweep(sysexp, store, scheduler="synchronous")
    before = store.read_bytes()
    with pytest.raises(StoreError, match="holds systolic points; got a model experiment"):
        run_sweep(exp, store, scheduler="synchronous")
    assert store.read_bytes() == before
    conn = sqlite3.connect(store)
    conn.execute("UPDATE meta SET value = 'nodeperf.sweep/0' WHERE key = 'schema'")
    conn.commit()
    conn.close()
    before = store.read_bytes()
    with pytest.raises(StoreError, match="another store schema; got 'nodeperf.sweep/0'"):
        run_sweep(sysexp, store, scheduler="synchronous")
    assert store.read_bytes() == before
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all, just text" * 10)
    with pytest.raises(StoreError, match="not a SQLite file"):
        run_sweep(exp, junk, scheduler="synchronous")
    assert junk.read_bytes() == b"not a database at all, just text" * 10
    with pytest.raises(StoreError, match="unknown store format"):
        run_sweep(exp, tmp_path / "x.csv", scheduler="synchronous")


def test_unreachable_scheduler_fails_fast_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    t = time.monotonic()
    with pytest.raises(SweepError, match="no Dask scheduler answered within 1 s"):
        run_sweep(_write(tmp_path), out, scheduler="tcp://127.0.0.1:9", connect_timeout_s=1.0)
    assert time.monotonic() - t < 60  # a bound on a hang, not a speed figure
    assert not out.exists()
    for bad in ("tcp://nohost", "dask", "tcp://h:99999"):
        with pytest.raises(SweepError, match="--scheduler"):
            run_sweep(_write(tmp_path), out, scheduler=bad)
    assert not out.exists()


TINY_GEMM = "Layer name, M, N, K,\ng, 64, 64, 64,\n"


def test_systolic_hand_computed_case(tmp_path: Path) -> None:
    """The worked example of hwmodels/systolic.py: 64x64x64 on 8x8 os, 1 KiB scratchpads, 10 words/cycle."""
    (tmp_path / "g.csv").write_text(TINY_GEMM, encoding="utf-8")
    f = tmp_path / "t.toml"
    f.write_text("""
[workload]
topology = "g.csv"
[systolic]
rows = 8
cols = 8
dataflow = "os"
sram_bytes = "1 KiB"
dram_words_per_cycle = 10
clock_hz = "1 GHz"
""", encoding="utf-8")
    out = tmp_path / "t.sqlite"
    run_sweep(f, out, scheduler="synchronous")
    row = load_results(out).iloc[0]
    assert row["compute_cycles"] == 64 * 78 - 1 == 4991
    assert row["cycles"] == 4998  # 7 drain cycles exposed
    assert row["stall_cycles"] == 0
    assert row["dram_bytes"] == 32768 + 4096 + 4096  # ifmap re-read per column fold, filter once, outputs
    assert row["utilisation"] == pytest.approx(64**3 / (4998 * 64))
    assert row["latency_s"] == pytest.approx(4998e-9)


def test_systolic_rows_equal_the_per_layer_and_whole_network_models(tmp_path: Path) -> None:
    from hwmodels.topology import read_topology
    from simulator.cli.systolic import evaluate_topology
    from simulator.sweep.systolic import systolic_network_variants

    topo_path = REPO / "tests/hwmodels/data/parity_cnn.csv"
    topo = read_topology(topo_path)
    body = f"""
[workload]
topology = "{topo_path}"
[systolic]
per_layer = {{per_layer}}
[axes.systolic]
rows = [8, 32]
cols = [16]
dataflow = ["os", "ws", "is"]
sram_bytes = ["2 KiB", "64 KiB"]
dram_words_per_cycle = [4, 64]
"""
    (tmp_path / "l.toml").write_text(body.replace("{per_layer}", "true"), encoding="utf-8")
    (tmp_path / "n.toml").write_text(body.replace("{per_layer}", "false"), encoding="utf-8")
    layers = load_results(_run(tmp_path / "l.toml", tmp_path / "l.sqlite", "synchronous"))
    net = load_results(_run(tmp_path / "n.toml", tmp_path / "n.sqlite", "synchronous"))
    assert len(layers) == 2 * 3 * 2 * 2 * len(topo.layers) and len(net) == 24
    for row in net.itertuples(index=False):
        d = dict(zip(net.columns, row, strict=True))
        sram = int(d["systolic.sram_bytes"])
        r = evaluate_topology(topo, int(d["systolic.rows"]), int(d["systolic.cols"]), d["systolic.dataflow"],
                              sram_words=(sram, sram, sram), dram_words_per_cycle=d["systolic.dram_words_per_cycle"])
        mine = layers[(layers["systolic.rows"] == d["systolic.rows"]) & (layers["systolic.dataflow"] == d["systolic.dataflow"])
                      & (layers["systolic.sram_bytes"] == sram)
                      & (layers["systolic.dram_words_per_cycle"] == d["systolic.dram_words_per_cycle"])]
        by_layer = mine.set_index("workload.layer")["cycles"]
        for i, layer in enumerate(topo.layers):
            assert by_layer[layer.name] == int(r.total_cycles[i])
        assert d["cycles"] == int(np.sum(r.total_cycles))
        v = systolic_network_variants(topo, d["systolic.rows"], d["systolic.cols"], d["systolic.dataflow"],
                                      sram, sram, sram, d["systolic.dram_words_per_cycle"])
        assert d["cycles"] == int(v.total_cycles[0])
        assert d["dram_bytes"] == int(v.dram_bytes[0])
        assert d["utilisation"] * 100 == pytest.approx(float(v.overall_util_pct[0]), rel=1e-12)


def _brute_front(vals: np.ndarray) -> set[int]:
    keep = set()
    for i in range(len(vals)):
        dominated = any(np.all(vals[j] <= vals[i]) and np.any(vals[j] < vals[i]) for j in range(len(vals)) if j != i)
        if not dominated:
            keep.add(i)
    return keep


@pytest.mark.parametrize("d", [2, 3])
def test_pareto_front_equals_brute_force(d: int) -> None:
    rng = np.random.default_rng(0)
    vals = rng.integers(0, 12, size=(300, d)).astype(float)  # many ties
    df = pd.DataFrame(vals, columns=[f"m{i}" for i in range(d)])
    df.loc[5, "m0"] = np.nan  # left out
    front = pareto_front(df, [f"m{i}" for i in range(d)])
    ok = ~np.isnan(df.to_numpy()).any(axis=1)
    idx = np.flatnonzero(ok)
    assert set(front.index) == {int(idx[i]) for i in _brute_front(df.to_numpy()[ok])}
    assert front["m0"].is_monotonic_increasing
    # max: flips a metric
    front2 = pareto_front(df, ["m0", "max:m1"])
    flipped = df[["m0", "m1"]].to_numpy() * np.array([1.0, -1.0])
    assert set(front2.index) == {int(idx[i]) for i in _brute_front(flipped[ok])}


def test_pareto_bad_metric() -> None:
    df = pd.DataFrame({"latency_s": [1.0], "energy_j": [2.0]})
    with pytest.raises(ValueError, match="did you mean 'energy_j'"):
        pareto_front(df, ["latency_s", "enrgy_j"])
    with pytest.raises(ValueError, match="two or more"):
        pareto_front(df, ["latency_s"])


def test_load_experiment_roundtrip_of_shipped_decode_experiment_subset(tmp_path: Path) -> None:
    """The shipped LLM experiment runs (a reduced copy: 2 batches x 1 context x 2 x 2 hardware values)."""
    text = (REPO / "studies/experiments/llm_decode_what_if.toml").read_text(encoding="utf-8")
    text = text.replace("batch = {pow2 = [1, 128]}", "batch = [1, 64]")
    text = text.replace("context = {range = [256, 4096], step = 256}", "context = [2048]")
    text = text.replace("n = 16}", "n = 2}").replace("n = 8}", "n = 2}")
    f = tmp_path / "llm.toml"
    f.write_text(text, encoding="utf-8")
    assert load_experiment(f).size == 8
    s = run_sweep(f, tmp_path / "llm.sqlite", scheduler="synchronous")
    assert s.computed == 8 and s.errors == 0
    df = load_results(tmp_path / "llm.sqlite")
    # batch 64 decodes more tokens per second than batch 1 on the same hardware
    b = df.pivot_table(index=["hardware.memory.hbm.read_bandwidth_bytes_per_s",
                              "hardware.compute.tensor_flops_per_s.bf16"],
                       columns="workload.batch", values="throughput_per_s")
    assert (b[64] > b[1]).all()


def test_systolic_zoo_model_counts_grouped_layers(tmp_path: Path) -> None:
    """A zoo CNN's convolutions and matmuls on arrays: whole-network rows equal the whole-network model (with
    depthwise convolutions run once per group), and the per-layer rows sum to them."""
    from simulator.sweep.systolic import systolic_network_variants

    body = """
[workload]
model = "mobilenet_v2"
seq = 96
[systolic]
dataflow = "ws"
sram_bytes = "16 KiB"
dram_words_per_cycle = 8
per_layer = {per_layer}
[axes.systolic]
rows = [16, 64]
cols = [32]
"""
    (tmp_path / "n.toml").write_text(body.replace("{per_layer}", "false"), encoding="utf-8")
    (tmp_path / "l.toml").write_text(body.replace("{per_layer}", "true"), encoding="utf-8")
    net = load_results(_run(tmp_path / "n.toml", tmp_path / "n.sqlite", "synchronous")).set_index("systolic.rows")
    per = load_results(_run(tmp_path / "l.toml", tmp_path / "l.sqlite", "synchronous"))
    graph = load_workload("mobilenet_v2", seq=96)
    v = systolic_network_variants(graph, [16, 64], 32, "ws", 16384, 16384, 16384, 8.0)
    for i, r in enumerate((16, 64)):
        assert net.loc[r, "cycles"] == int(v.total_cycles[i])
        assert net.loc[r, "dram_bytes"] == int(v.dram_bytes[i])
        assert per[per["systolic.rows"] == r]["cycles"].sum() == net.loc[r, "cycles"]
    assert per["workload.layer"].nunique() == len(per) // 2  # one row per (layer, design)


def test_option_axes_equal_direct_engine_calls(tmp_path: Path) -> None:
    """Options are axes too: fusion, the discrete-event engine and a tensor-parallel plan, each point equal to
    the engine called directly with those options."""
    from simulator.engines.discrete_event import simulate
    from workloads.parallel import ParallelPlan

    head = """
metrics = ["latency_s", "energy_j", "memory_bytes"]
[workload]
model = "gpt2"
phase = "decode"
batch = 4
context = 128
"""
    f = tmp_path / "o.toml"
    f.write_text(head + '[hardware]\nname = "h100-sxm5-80gb"\n[axes.options]\nengine = ["analytical", "des"]\n'
                 "fusion = [false, true]\n", encoding="utf-8")
    df = load_results(_run(f, tmp_path / "o.sqlite", "synchronous"))
    assert len(df) == 4 and df["error"].isna().all()
    hw = load_hardware("h100-sxm5-80gb")
    g = load_workload("gpt2", phase="decode", batch=4, context=128)
    for row in df.to_dict("records"):
        opts = EvalOptions(fusion=row["options.fusion"])
        rep = simulate(g, hw, opts) if row["options.engine"] == "des" else evaluate(g, hw, opts)
        assert row["latency_s"] == pytest.approx(rep.totals.latency_s, rel=1e-12), row
        assert row["energy_j"] == pytest.approx(rep.totals.energy_j, rel=1e-12)
    # a tensor-parallel plan on a system; the discrete-event engine takes no plan: an error row, not a drop
    f2 = tmp_path / "p.toml"
    f2.write_text(head + '[hardware]\nname = "dgx-h100"\n[axes.options]\nengine = ["analytical", "des"]\n'
                  "tp = [1, 2]\n", encoding="utf-8")
    dfp = load_results(_run(f2, tmp_path / "p.sqlite", "synchronous"))
    sys_hw = load_hardware("dgx-h100")
    for row in dfp.to_dict("records"):
        if row["options.engine"] == "des":
            assert "engine 'des' with a parallel plan" in row["error"] and np.isnan(row["latency_s"])
            continue
        rep = evaluate(g, sys_hw, EvalOptions(plan=ParallelPlan(tp=int(row["options.tp"]))))
        assert row["latency_s"] == pytest.approx(rep.totals.latency_s, rel=1e-12)
        assert row["memory_bytes"] == rep.memory.required_bytes
    # a plan no model can run (shard_group 3 of dp 8, without fsdp) is its point's error row too, as tp 3 on a
    # 32-head model is; it had ended the whole sweep with one unlocated line while the points were keyed
    f3 = tmp_path / "s.toml"
    f3.write_text(head + '[hardware]\nname = "dgx-h100"\n[options]\ndp = 8\n[axes.options]\nshard_group = [0, 3]\n',
                  encoding="utf-8")
    dfs = load_results(_run(f3, tmp_path / "s.sqlite", "synchronous")).set_index("options.shard_group").sort_index()
    assert dfs["error"].isna().tolist() == [True, False]
    assert dfs.loc[3, "error"].startswith("plan: shard_group: got 3 with dp 8 and no fsdp")
    assert np.isnan(dfs.loc[3, "latency_s"]) and dfs.loc[0, "latency_s"] > 0
    ana = dfp[dfp["options.engine"] == "analytical"].set_index("options.tp")
    # the plan reached the engine: tp 2 holds half of GPT-2's weights per device, and NCCL's buffers for its
    # communicator (docs/training_memory.md), which outweigh the saving for a model this small
    assert ana.loc[2, "memory_bytes"] != ana.loc[1, "memory_bytes"]


def test_shipped_systolic_experiment_reduced(tmp_path: Path) -> None:
    """The shipped ResNet-50 experiment on a reduced grid: one row per (design, layer); bigger arrays never
    take more compute cycles on a layer; the store extends when the grid grows."""
    text = (REPO / "studies/experiments/systolic_resnet50.toml").read_text(encoding="utf-8")
    text = text.replace('topology = "../topologies/resnet50.csv"',
                        f'topology = "{REPO / "studies/topologies/resnet50.csv"}"')
    small = (text.replace("rows = {pow2 = [8, 256]}", "rows = [16, 32]").replace("cols = {pow2 = [8, 256]}", "cols = [32]")
             .replace('dataflow = ["os", "ws", "is"]', 'dataflow = ["ws"]')
             .replace('sram_bytes = {pow2 = ["32 KiB", "1 MiB"]}', 'sram_bytes = ["64 KiB"]')
             .replace("dram_words_per_cycle = [4, 8, 16, 32, 64]", "dram_words_per_cycle = [16]"))
    f = tmp_path / "s.toml"
    f.write_text(small, encoding="utf-8")
    out = tmp_path / "s.parquet"
    s = run_sweep(f, out, scheduler="synchronous")
    assert s.total == 2 * 54 and s.errors == 0
    df = load_results(out)
    wide = df.pivot_table(index="workload.layer", columns="systolic.rows", values="compute_cycles")
    assert len(wide) == 54 and (wide[32] <= wide[16]).all()
    f.write_text(small.replace("dram_words_per_cycle = [16]", "dram_words_per_cycle = [16, 64]"), encoding="utf-8")
    s2 = run_sweep(f, out, scheduler="synchronous")
    assert (s2.total, s2.computed, s2.reused) == (4 * 54, 2 * 54, 2 * 54)
    df2 = load_results(out)
    assert len(df2) == 4 * 54 and df2["point_key"].is_unique
    more = df2.pivot_table(index=["workload.layer", "systolic.rows"], columns="systolic.dram_words_per_cycle",
                           values="cycles")
    assert (more[64] <= more[16]).all()  # more DRAM bandwidth never adds cycles


def test_load_results_identifiers_work_in_query(tmp_path: Path) -> None:
    out = _run(_write(tmp_path, batch="[1, 8]"), tmp_path / "q.sqlite", "synchronous")
    dotted = load_results(out)
    assert "workload.batch" in dotted.columns  # the default keeps the store's names
    df = load_results(out, identifiers=True)
    assert list(df.columns) == [c.replace(".", "__") for c in dotted.columns]
    sel = df.query("workload__batch >= 8")
    assert len(sel) == 2 and set(sel["workload__batch"]) == {8}
    assert set(sel["hardware__memory__hbm__read_bandwidth_bytes_per_s"]) == {2e12, 4e12}
    assert sel["latency_s"].tolist() == dotted[dotted["workload.batch"] >= 8]["latency_s"].tolist()


def test_training_recipe_axes_equal_evaluate_plan(tmp_path: Path) -> None:
    """Today's plan fields are sweep axes too (offload, FSDP, a MaxText remat policy): each point equals
    evaluate_plan with that plan, and the axes reach it (host offload of the optimizer lowers the memory)."""
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    f = tmp_path / "t.toml"
    f.write_text('metrics = ["latency_s", "memory_bytes"]\n[workload]\nmodel = "gpt2"\ntrain = true\nseq = 256\n'
                 '[hardware]\nname = "dgx-h100"\n[options]\ndp = 2\nfsdp = true\nmicrobatch = 2\n'
                 '[axes.options]\noffload = ["none", "optimizer"]\n[axes.workload]\n'
                 'recompute = ["none", "minimal"]\n', encoding="utf-8")
    df = load_results(_run(f, tmp_path / "t.sqlite", "synchronous"))
    assert len(df) == 4 and df["error"].isna().all(), df["error"].tolist()
    hw = load_hardware("dgx-h100")
    for row in df.to_dict("records"):
        off = () if row["options.offload"] == "none" else (row["options.offload"],)
        plan = ParallelPlan(dp=2, fsdp=True, microbatch=2, offload=off)
        res = evaluate_plan("gpt2", hw, plan, EvalOptions(plan=plan), train=True, seq=256,
                            recompute=row["workload.recompute"]).to_cost_report()
        assert row["latency_s"] == pytest.approx(res.totals.latency_s, rel=1e-12), row
        assert row["memory_bytes"] == res.memory.required_bytes
    by = df.set_index(["options.offload", "workload.recompute"])["memory_bytes"]
    assert by[("optimizer", "none")] < by[("none", "none")]


def test_unknown_plan_axis_value_is_located(tmp_path: Path) -> None:
    f = tmp_path / "b.toml"
    f.write_text('[workload]\nmodel = "gpt2"\ntrain = true\n[hardware]\nname = "dgx-h100"\n'
                 '[axes.options]\noffload = ["optimiser"]\n', encoding="utf-8")
    with pytest.raises(ExperimentError, match=r"offload.*optimiser.*did you mean.*optimizer"):
        load_experiment(f)


def test_fp8_linears_axis_equals_evaluate_plan(tmp_path: Path) -> None:
    """An fp8 recipe is a workload axis of a training step: on one device (no plan keys) each point is
    evaluate_plan with that recipe, the recipes differ from each other, and on an inference phase the
    recipe is an error row that says why."""
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    f = tmp_path / "f.toml"
    f.write_text('metrics = ["latency_s"]\n[workload]\nmodel = "gpt2"\ntrain = true\nbatch = 4\nseq = 512\n'
                 '[hardware]\nname = "h100-sxm5-80gb"\n[axes.workload]\nfp8_linears = ["tensorwise", "delayed"]\n',
                 encoding="utf-8")
    df = load_results(_run(f, tmp_path / "f.sqlite", "synchronous"))
    assert len(df) == 2 and df["error"].isna().all(), df["error"].tolist()
    hw = load_hardware("h100-sxm5-80gb")
    for row in df.to_dict("records"):
        res = evaluate_plan("gpt2", hw, ParallelPlan(microbatch=4), EvalOptions(), train=True, seq=512,
                            fp8_linears=row["workload.fp8_linears"])
        assert row["latency_s"] == pytest.approx(res.latency_s, rel=1e-12), row
    assert df["latency_s"].nunique() == 2
    f.write_text('[workload]\nmodel = "gpt2"\nphase = "prefill"\nfp8_linears = "tensorwise"\n'
                 '[hardware]\nname = "h100-sxm5-80gb"\n', encoding="utf-8")
    bad = load_results(_run(f, tmp_path / "b.sqlite", "synchronous"))
    assert "fp8_linears: 'tensorwise' is a training recipe" in bad["error"].iloc[0]
    # a training step's batch under a plan is the plan's microbatch: a workload batch is refused, not dropped
    f.write_text('[workload]\nmodel = "gpt2"\ntrain = true\nbatch = 4\n[hardware]\nname = "dgx-h100"\n'
                 '[options]\ndp = 2\n', encoding="utf-8")
    bad = load_results(_run(f, tmp_path / "c.sqlite", "synchronous"))
    assert "expected options.microbatch" in bad["error"].iloc[0]

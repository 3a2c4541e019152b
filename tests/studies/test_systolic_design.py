"""The systolic-design study on its reduced configuration: every MAC of the graphs is on the array, cycles
agree with the closed form layer by layer, and more scratchpad never costs DRAM traffic."""

from __future__ import annotations

import csv

import pytest

from studies._cli import load_config
from studies.systolic_design import run


@pytest.fixture(scope="module")
def rows():
    return run.run(load_config(run.HERE / "config.toml", reduced=True))


def test_memory_system_is_one_tpu_v4_mxu_share():
    words, clock = run.memory_system(load_config(run.HERE / "config.toml"))
    # TPU v4: 1200 GB/s HBM, 1.05 GHz, 2 TensorCores x 4 MXUs, bf16 words
    assert words == pytest.approx(1200e9 / (1.05e9 * 8) / 2)
    assert clock == pytest.approx(1.05e9)


def test_every_mac_of_the_graph_is_counted(rows):
    from workloads.resolve import load_workload

    for w in load_config(run.HERE / "config.toml", reduced=True)["workloads"]:
        g = load_workload(w["model"], batch=w["batch"], seq=w.get("seq"))
        macs = 0
        for op in g:
            if op.kind in ("conv2d", "matmul"):
                bias = op.outputs[0].numel if len(op.inputs) == 3 else 0  # a bias add is a FLOP, not a MAC
                macs += (op.flops - bias) // 2
            elif op.kind == "attention":
                macs += op.flops // 2  # Q K^T and P V (the softmax is not counted in FLOPs)
        mine = {r["macs"] for r in rows if r["model"] == w["model"]}
        assert mine == {macs}, w["model"]
    # published count: torchvision's model table lists 4.09 GFLOPS (multiply-adds) for ResNet-50 v1.5 at 224 x 224
    resnet = next(r["macs"] for r in rows if r["model"] == "resnet50")
    assert resnet == pytest.approx(4.09e9, rel=0.005)


def test_cycles_match_the_closed_form_layer_by_layer(rows):
    import numpy as np

    from hwmodels.systolic import gemm_cycles
    from workloads.resolve import load_workload

    cfg = load_config(run.HERE / "config.toml", reduced=True)
    words, _ = run.memory_system(cfg)
    w = cfg["workloads"][1]  # BERT: matmuls and attention GEMMs
    layers = run.array_layers(load_workload(w["model"], batch=w["batch"], seq=w.get("seq")))
    r = next(x for x in rows if x["model"] == w["model"] and x["rows"] == 128 and x["dataflow"] == "ws"
             and x["sram_kib"] == 1024)
    sram = 1024 * 1024 // cfg["word_bytes"]
    total = dram = 0
    for i in range(len(layers.names)):
        one = gemm_cycles(128, 128, "ws", int(layers.m[i]), int(layers.n[i]), int(layers.k[i]),
                          ifmap_words=int(layers.ifmap_words[i]), sram_words=(sram, sram, sram),
                          dram_words_per_cycle=words)
        rep = int(layers.repeat[i])
        total += rep * int(one.total_cycles)
        dram += rep * int(np.sum([one.dram_ifmap_reads, one.dram_filter_reads, one.dram_ofmap_writes,
                                  one.dram_ofmap_reads]))
    assert r["total_cycles"] == total
    assert r["dram_bytes"] == dram * cfg["word_bytes"]
    assert r["overall_util_pct"] == pytest.approx(100 * r["macs"] / (total * 128 * 128))


def test_design_space_properties(rows):
    for r in rows:
        assert 0 < r["overall_util_pct"] <= 100
        assert r["total_cycles"] >= r["compute_cycles"] >= r["macs"] / (r["rows"] * r["cols"])
        assert r["latency_s"] == pytest.approx(r["total_cycles"] / r["clock_hz"])
    key = lambda r: (r["model"], r["rows"], r["dataflow"])  # noqa: E731
    by = {}
    for r in rows:
        by.setdefault(key(r), {})[r["sram_kib"]] = r
    for k, sizes in by.items():
        small, big = sizes[64], sizes[1024]
        assert big["dram_bytes"] <= small["dram_bytes"], k  # more scratchpad never re-reads more
        assert big["total_cycles"] <= small["total_cycles"], k
        assert big["compute_cycles"] == small["compute_cycles"], k  # the array's schedule does not change
    # the square array beats the 32 x 512 one for both networks at the best dataflow and scratchpad
    for model in ("resnet50", "bert_base"):
        best = {rr: min(r["total_cycles"] for r in rows if r["model"] == model and r["rows"] == rr) for rr in (32, 128)}
        assert best[128] < best[32]


def test_runner_writes_csv_and_figures(tmp_path, rows):
    run.write_csv(rows, tmp_path / run.CSV_NAME)  # what `main` writes before it draws (the run is the fixture's)
    assert run.main(["--plot-only", "--out", str(tmp_path)]) == 0
    with open(tmp_path / run.CSV_NAME, newline="") as f:
        back = list(csv.DictReader(f))
    assert len(back) == 2 * 2 * 3 * 2 and set(back[0]) == set(run.COLUMNS)
    for name in run.FIGURES.values():
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_committed_results_are_current(rows, committed_csv):
    """The committed results.csv (and the figures drawn from it) is today's model, in every column, on every row
    the reduced configuration computes."""
    n = committed_csv(rows, run.HERE / run.CSV_NAME, run.write_csv, ["model", "rows", "dataflow", "sram_kib"],
                      refresh="python -m studies.systolic_design --out studies/systolic_design --figures docs/figures")
    assert n == len(rows)

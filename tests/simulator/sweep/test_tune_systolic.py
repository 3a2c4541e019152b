"""Systolic-array tuning: exhaustive search against brute force over a geometry grid, budget pruning,
and the seeded Bayesian search (deterministic, no worse than random sampling of the same budget)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from hwmodels.systolic import gemm_cycles, load_systolic_energy, systolic_energy
from hwmodels.topology import parse_topology
from simulator.sweep.tune import TuneError, parse_constraint, tune
from simulator.sweep.tune_systolic import SystolicProblem, load_network, parse_split

ROOT = Path(__file__).resolve().parents[3]

# a small CNN-like network: two convolutions and a classifier GEMM
NET = """Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,
conv1, 34, 34, 3, 3, 16, 32, 1,
conv2, 18, 18, 3, 3, 32, 64, 2,
"""
GEMM = "Layer, M, N, K,\nfc, 64, 100, 1024,\n"


def _network():  # type: ignore[no-untyped-def]
    conv = parse_topology(NET, "net.csv")
    fc = parse_topology(GEMM, "fc.csv")
    return type(conv)(source="net", layers=conv.layers + fc.layers)


def test_exhaustive_equals_brute_force_over_a_geometry_grid() -> None:
    net = _network()
    rows = cols = (4, 8, 16, 32)
    flows, sizes, splits, bw = ("os", "ws", "is"), (8.0, 32.0), ("1:1:1", "2:1:1", "1:1:2"), 4.0
    problem = SystolicProblem(net, rows=rows, cols=cols, dataflows=flows, sram_kib=sizes, splits=splits,
                              dram_words_per_cycle=bw)
    res = tune(problem, [parse_constraint("pes<=256", problem.metrics)], "cycles", "min", search="exhaustive",
               top=400)
    # brute force: each design's layers one by one, the split computed here
    brute = []
    m = [layer.m for layer in net.layers]
    n = [layer.n for layer in net.layers]
    k = [layer.k for layer in net.layers]
    ifw = [layer.ifmap_words for layer in net.layers]
    for r, c, df, kib, sp in itertools.product(rows, cols, flows, sizes, splits):
        if r * c > 256:
            continue
        a, b, o = (int(x) for x in sp.split(":"))
        words = int(kib * 1024)
        caps = (words * a // (a + b + o), words * b // (a + b + o), words * o // (a + b + o))
        total = 0
        for i in range(len(m)):
            one = gemm_cycles(r, c, df, m[i], n[i], k[i], ifmap_words=ifw[i], sram_words=caps,
                              dram_words_per_cycle=bw)
            total += int(one.total_cycles)
        brute.append((total, (r, c, df, kib, sp)))
    best = min(x for x, _ in brute)
    got = [(t.config["rows"], t.config["cols"], t.config["dataflow"], t.config["sram_kib"], t.config["sram_split"])
           for t in res.feasible]
    assert len(got) == len(brute) == (16 - 3) * 3 * 2 * 3  # 16x32, 32x16 and 32x32 are over 256 PEs
    assert [t.metrics["cycles"] for t in res.feasible] == sorted(x for x, _ in brute)
    assert {cfg: x for x, cfg in brute} == {g: t.metrics["cycles"] for g, t in zip(got, res.feasible, strict=True)}
    assert got[0] in {cfg for x, cfg in brute if x == best}
    # the memory split matters at this bandwidth: the designs do not all tie
    assert len({x for x, _ in brute}) > 50


def test_budget_constraints_prune_before_evaluation() -> None:
    problem = SystolicProblem(_network(), rows=(8, 16, 64), cols=(8, 16, 64), dataflows=("os",), sram_kib=(16.0, 64.0),
                              splits=("1:1:1",), dram_words_per_cycle=8)
    cons = [parse_constraint("pes<=1024", problem.metrics), parse_constraint("sram_bytes<=32 KiB", problem.metrics)]
    res = tune(problem, cons, "cycles", "min", search="exhaustive")
    pruned = {(t.config["rows"], t.config["cols"], t.config["sram_kib"]) for t in res.visited if t.status == "pruned"}
    expect = {(r, c, s) for r, c, s in itertools.product((8, 16, 64), (8, 16, 64), (16.0, 64.0))
              if r * c > 1024 or s * 1024 > 32 * 1024}
    assert pruned == expect
    assert res.evaluations == 18 - len(expect)
    t = next(t for t in res.visited if (t.config["rows"], t.config["cols"], t.config["sram_kib"]) == (64, 64, 16.0))
    assert t.reason == "breaks pes<=1024: 4,096, limit 1,024 (3,072 over)"


def test_utilisation_and_clock() -> None:
    problem = SystolicProblem(load_network("gemm:m=64,n=64,k=64"), rows=(8,), cols=(8,), dataflows=("os",),
                              sram_kib=(3.0,), splits=("1:1:1",), dram_words_per_cycle=10, clock_hz=1e9)
    (t,) = tune(problem, [], "latency_s", "min").best
    # hand check (hwmodels/systolic.py worked example): 64 folds of 78 cycles, 4991 compute cycles,
    # 7 drain cycles exposed, no stall: 4998 cycles; 64^3 MACs on 64 PEs
    assert t.metrics["cycles"] == 4998
    assert t.metrics["latency_s"] == pytest.approx(4998e-9)
    assert t.metrics["util_pct"] == pytest.approx(100 * 64**3 / (4998 * 64))
    assert t.metrics["dram_words"] == 32768 + 4096 + 4096


def test_energy_objective_equals_brute_force() -> None:
    """The energy objective ranks designs by the summed energy of their layers, computed here one layer at
    a time; the static part accrues at --clock, or at the energy file's clock without one."""
    net = _network()
    rows = cols = (4, 8, 16)
    flows, sizes, splits, bw = ("os", "ws", "is"), (8.0, 64.0), ("1:1:1", "2:1:1"), 4.0
    for clock in (None, 7e8):
        problem = SystolicProblem(net, rows=rows, cols=cols, dataflows=flows, sram_kib=sizes, splits=splits,
                                  dram_words_per_cycle=bw, clock_hz=clock)
        res = tune(problem, [], "energy_j", "min", search="exhaustive", top=200)
        brute = {}
        for r, c, df, kib, sp in itertools.product(rows, cols, flows, sizes, splits):
            a, b, o = (int(x) for x in sp.split(":"))
            words = int(kib * 1024)
            caps = (words * a // (a + b + o), words * b // (a + b + o), words * o // (a + b + o))
            total = 0.0
            for layer in net.layers:
                one = gemm_cycles(r, c, df, layer.m, layer.n, layer.k, ifmap_words=layer.ifmap_words, sram_words=caps,
                                  dram_words_per_cycle=bw)
                total += float(systolic_energy(one, dtype="int8", sram_bytes=caps, clock_hz=clock).energy_j)
            brute[(r, c, df, kib, sp)] = total
        got = {(t.config["rows"], t.config["cols"], t.config["dataflow"], t.config["sram_kib"], t.config["sram_split"]):
               t.metrics["energy_j"] for t in res.feasible}
        assert got.keys() == brute.keys()
        for cfg, e in brute.items():
            assert got[cfg] == pytest.approx(e, rel=1e-12)
        assert res.best[0].metrics["energy_j"] == pytest.approx(min(brute.values()), rel=1e-12)
    assert load_systolic_energy().clock_hz == 1e9  # the clock used above when none is given


def test_energy_constraint_and_dtype() -> None:
    problem = SystolicProblem(_network(), rows=(8, 16), cols=(8, 16), dataflows=("ws",), sram_kib=(32.0,),
                              splits=("1:1:1",), dram_words_per_cycle=8, word_bytes=2)
    assert problem.dtype == "bf16" and "energy_j" in problem.metrics
    res = tune(problem, [parse_constraint("energy_j<=1 J", problem.metrics)], "cycles", "min", search="exhaustive")
    assert len(res.feasible) == 4
    with pytest.raises(TuneError, match="no dtype for a 3-byte word"):
        SystolicProblem(_network(), dram_words_per_cycle=8, word_bytes=3)
    with pytest.raises(TuneError, match="did you mean 'bf16'"):
        SystolicProblem(_network(), dram_words_per_cycle=8, dtype="bf61")


def _resnet_problem() -> SystolicProblem:
    net = load_network(str(ROOT / "studies" / "topologies" / "resnet50.csv"))
    sides = (4, 8, 16, 32, 64, 128, 256)
    return SystolicProblem(net, rows=sides, cols=sides, sram_kib=(64.0, 128.0, 256.0, 512.0), dram_words_per_cycle=16)


def test_bayes_is_deterministic_and_no_worse_than_random_of_the_same_budget() -> None:
    problem = _resnet_problem()
    assert problem.space.size == 4116
    cons = [parse_constraint("pes<=4096", problem.metrics)]
    exact = tune(problem, cons, "cycles", "min", search="exhaustive").best[0].metrics["cycles"]
    for seed in (0, 1):
        a = tune(problem, cons, "cycles", "min", search="bayes", trials=40, seed=seed)
        if seed == 0:
            b = tune(problem, cons, "cycles", "min", search="bayes", trials=40, seed=seed)
            assert [t.index for t in a.visited] == [t.index for t in b.visited]
            assert a.to_json() == b.to_json()
        rnd = tune(problem, cons, "cycles", "min", search="random", trials=40, seed=seed)
        assert a.evaluations == rnd.evaluations == 40
        found, sampled = a.best[0].metrics["cycles"], rnd.best[0].metrics["cycles"]
        assert exact <= found <= sampled
    # and auto picks the Bayesian search for a space larger than the budget
    assert tune(problem, cons, "cycles", "min", trials=8).method == "bayes"


def test_random_search_is_seeded() -> None:
    problem = _resnet_problem()
    a = tune(problem, [], "cycles", "min", search="random", trials=10, seed=5)
    b = tune(problem, [], "cycles", "min", search="random", trials=10, seed=5)
    c = tune(problem, [], "cycles", "min", search="random", trials=10, seed=6)
    assert [t.index for t in a.visited] == [t.index for t in b.visited] != [t.index for t in c.visited]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"dataflows": ("xs",)}, "unknown dataflow 'xs'"),
    ({"rows": (0,)}, "--rows"),
    ({"sram_kib": (-1.0,)}, "--sram-kib"),
    ({"splits": ("1:1",)}, "--sram-split '1:1'"),
    ({"dram_words_per_cycle": 0.0}, "--dram-words-per-cycle"),
])
def test_bad_systolic_input(kwargs: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {"dram_words_per_cycle": 8.0}
    args.update(kwargs)
    with pytest.raises(TuneError) as err:
        SystolicProblem(_network(), **args)  # type: ignore[arg-type]
    assert needle in str(err.value)


def test_network_specs() -> None:
    assert parse_split("2:1:1") == (2, 1, 1)
    net = load_network("gemm:m=8,n=16,k=32")
    a = net.gemm_arrays()
    assert (int(a["m"][0]), int(a["n"][0]), int(a["k"][0])) == (8, 16, 32)
    with pytest.raises(TuneError, match="missing k"):
        load_network("gemm:m=8,n=16")
    assert np.all(load_network(str(ROOT / "studies" / "topologies" / "resnet50.csv")).gemm_arrays()["m"] > 0)


def test_cli_energy_objective_and_cost_refused(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from simulator.cli import main

    base = ["tune", "gemm:m=64,n=64,k=64", "--systolic", "--dram-words-per-cycle", "8", "--rows", "8,16",
            "--cols", "8", "--sram-kib", "16"]
    assert main([*base, "--objective", "energy", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = doc["best"][0]
    assert doc["metric"] == "energy_j" and best["metrics"]["energy_j"] > 0
    energies = sorted(t["metrics"]["energy_j"] for t in doc["best"])
    assert best["metrics"]["energy_j"] == energies[0]
    assert main([*base, "--objective", "cost"]) == 2
    err = capsys.readouterr().err
    assert "unknown objective 'cost'" in err and "no price model" in err and err.count("\n") == 1

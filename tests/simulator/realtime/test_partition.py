"""nodeperf partition: exact solvers against brute force, hand cases, unsupported ops, pipelines, CLI."""

import itertools
import json
import math

import numpy as np
import pytest

from hwmodels.catalog import load_device
from hwmodels.node import NodeDevice, NodeLink, NodeSpec, load_node
from simulator.cli.main import main
from simulator.realtime.partition import (
    CostTable,
    PartitionError,
    build_problem,
    check_objective,
    evaluate_placement,
    partition,
    solve_brute_force,
    solve_dp,
    solve_milp,
    solve_pipeline,
)
from workloads.ir import GraphBuilder

DEVS = ("h100-sxm5-80gb", "systolic-128x128-bf16", "xeon-platinum-8480")


def _node(n_dev, links, bw=10e9, lat=1e-6, epb=1e-12):
    """A node of ``n_dev`` catalog devices d0..d{n-1}; ``links`` lists the linked pairs."""
    devices = tuple(NodeDevice(f"d{k}", load_device(DEVS[k])) for k in range(n_dev))
    lk = tuple(NodeLink(a=f"d{a}", b=f"d{b}", kind="pcie5", bandwidth_bytes_per_s=bw, latency_s=lat,
                        energy_j_per_byte=epb) for a, b in links)
    return NodeSpec(name=f"test{n_dev}", description="test node", devices=devices, links=lk)


def _random_dag(rng, n_ops):
    """A random DAG of elementwise ops (1-2 inputs each from earlier ops or the graph input)."""
    b = GraphBuilder("rand", dtype="bf16")
    x = b.input("x", (int(rng.integers(1, 64)), 256))
    outs = [x]
    for i in range(n_ops):
        if len(outs) > 1 and rng.random() < 0.4:
            a, c = rng.choice(len(outs), size=2, replace=False)
            outs.append(b.op("elementwise", [outs[a], outs[c]], name=f"op{i}", op="add"))
        else:
            a = int(rng.integers(max(0, len(outs) - 3), len(outs)))
            outs.append(b.op("elementwise", [outs[a]], name=f"op{i}", op="relu"))
    return b.build()


def _random_costs(rng, graph, n_dev, p_unsupported=0.15):
    n = len(graph)
    t = rng.uniform(1e-6, 1e-4, size=(n, n_dev))
    e = rng.uniform(1e-6, 1e-3, size=(n, n_dev))
    reasons = {}
    for i, op in enumerate(graph):
        for k in range(1, n_dev):  # device 0 runs everything, so a feasible placement exists
            if rng.random() < p_unsupported:
                t[i, k] = e[i, k] = math.inf
                reasons[(op.name, f"d{k}")] = "test: unsupported"
    idle = rng.uniform(1.0, 50.0, size=n_dev)
    return CostTable(ops=tuple(o.name for o in graph), devices=tuple(f"d{k}" for k in range(n_dev)), time_s=t,
                     dynamic_energy_j=e, idle_w=idle, reasons=reasons)


CASES = [(seed, n_ops, n_dev, links) for seed, (n_ops, n_dev, links) in enumerate([
    (6, 2, [(0, 1)]), (8, 2, [(0, 1)]), (7, 3, [(0, 1), (1, 2), (0, 2)]), (6, 3, [(0, 1), (0, 2)]),
    (8, 3, [(0, 1), (1, 2)]), (5, 3, [(0, 1), (0, 2), (1, 2)]), (8, 2, [(0, 1)]), (7, 3, [(0, 2)]),
])]


@pytest.mark.parametrize("seed,n_ops,n_dev,links", CASES)
def test_dp_and_milp_equal_brute_force_on_small_dags(seed, n_ops, n_dev, links):
    rng = np.random.default_rng(seed)
    g = _random_dag(rng, n_ops)
    node = _node(n_dev, links, bw=float(rng.uniform(1e9, 1e11)), lat=float(rng.uniform(1e-7, 2e-5)))
    prob = build_problem(g, node, _random_costs(rng, g, n_dev))
    for objective in ("latency", "energy"):
        if objective == "latency":
            best, _ = solve_brute_force(prob, "latency")
            v_dp, pl_dp, exact = solve_dp(prob, "latency")
            v_milp, pl_milp, optimal = solve_milp(prob, "latency")
            assert exact and optimal
            assert v_dp == pytest.approx(best, rel=1e-9)
            assert v_milp == pytest.approx(best, rel=1e-7)
            assert evaluate_placement(prob, pl_dp)["latency_s"] == pytest.approx(best, rel=1e-9)
            assert evaluate_placement(prob, pl_milp)["latency_s"] == pytest.approx(best, rel=1e-7)
        # the full entry point (energy: per-subset DP) against brute force of the true objective
        for idle in ("used", "all"):
            best, _ = solve_brute_force(prob, objective, idle)
            res = partition(g, node, objective, costs=prob.costs, idle=idle)
            got = res.latency_s if objective == "latency" else res.energy_j
            assert got == pytest.approx(best, rel=1e-9)
            assert res.exact


def test_energy_subset_milp_equals_dp():
    rng = np.random.default_rng(42)
    g = _random_dag(rng, 8)
    node = _node(3, [(0, 1), (1, 2), (0, 2)])
    prob = build_problem(g, node, _random_costs(rng, g, 3))
    for subset in [(0, 1), (0, 2), (0, 1, 2)]:
        v_dp, _, _ = solve_dp(prob, "energy", subset=subset)
        v_milp, _, _ = solve_milp(prob, "energy", subset=subset)
        assert v_dp == pytest.approx(v_milp, rel=1e-7)


def test_beam_search_is_marked_inexact_and_never_better_than_the_optimum():
    rng = np.random.default_rng(3)
    g = _random_dag(rng, 8)
    node = _node(3, [(0, 1), (1, 2), (0, 2)])
    prob = build_problem(g, node, _random_costs(rng, g, 3, p_unsupported=0.0))
    best, _ = solve_brute_force(prob, "latency")
    v, pl, exact = solve_dp(prob, "latency", max_states=1)
    assert not exact
    assert v >= best * (1 - 1e-12)
    assert evaluate_placement(prob, pl)["latency_s"] == pytest.approx(v, rel=1e-9)


def _chain(n, rows=1024, cols=1024):
    b = GraphBuilder("chain", dtype="bf16")
    t = b.input("x", (rows, cols))
    for i in range(n):
        t = b.op("elementwise", [t], name=f"op{i}", op="relu")
    return b.build()


def _hand_costs(g, gpu_s, acc_s):
    n = len(g)
    t = np.array([[gpu_s[i], acc_s[i]] for i in range(n)])
    return CostTable(ops=tuple(o.name for o in g), devices=("d0", "d1"), time_s=t, dynamic_energy_j=t * 100.0,
                     idle_w=np.array([10.0, 1.0]), reasons={})


def test_hand_case_expensive_link_keeps_ops_on_gpu_cheap_link_moves_them():
    # 3-op chain; the middle op is 10 us on the GPU and 2 us on the accelerator; the chain's tensors are
    # 2 MiB (1024 x 1024 bf16). Moving op1 saves 8 us and costs two transfers of 2 MiB.
    g = _chain(3)
    costs = _hand_costs(g, [5e-6, 10e-6, 5e-6], [50e-6, 2e-6, 50e-6])
    nbytes = 1024 * 1024 * 2
    # expensive: 2 x (1 us + 2 MiB / 10 GB/s = 210.7 us) >> 8 us saved -> all on the GPU
    slow = partition(g, _node(2, [(0, 1)], bw=10e9, lat=1e-6), costs=costs)
    assert set(slow.placement.values()) == {"d0"}
    assert slow.latency_s == pytest.approx(20e-6)
    assert slow.transfers == ()
    # cheap: 2 x (0.1 us + 2 MiB / 10 TB/s = 0.31 us) = 0.63 us < 8 us -> op1 moves
    fast = partition(g, _node(2, [(0, 1)], bw=10e12, lat=1e-7), costs=costs)
    assert fast.placement == {"op0": "d0", "op1": "d1", "op2": "d0"}
    xfer = 1e-7 + nbytes / 10e12
    assert fast.latency_s == pytest.approx(5e-6 + 2e-6 + 5e-6 + 2 * xfer)
    assert [(t.src, t.dst) for t in fast.transfers] == [("d0", "d1"), ("d1", "d0")]
    assert fast.best_single_device == "d0" and fast.best_single_device_latency_s == pytest.approx(20e-6)
    assert fast.speedup == pytest.approx(20e-6 / fast.latency_s)


def test_no_link_means_no_cross_device_edge():
    g = _chain(3)
    costs = _hand_costs(g, [5e-6, 10e-6, 5e-6], [50e-6, 2e-6, 50e-6])
    res = partition(g, _node(2, []), costs=costs)  # the devices are not linked
    assert set(res.placement.values()) == {"d0"}


def test_unsupported_op_is_never_placed_on_that_device_and_the_reason_is_reported():
    g = _chain(3)
    costs = _hand_costs(g, [5e-6, 10e-6, 5e-6], [1e-9, 1e-9, 1e-9])
    t = costs.time_s.copy()
    t[1, 1] = math.inf
    costs = CostTable(ops=costs.ops, devices=costs.devices, time_s=t, dynamic_energy_j=t * 100.0,
                      idle_w=costs.idle_w, reasons={("op1", "d1"): "no attention rule"})
    for objective in ("latency", "energy", "throughput"):
        res = partition(g, _node(2, [(0, 1)], bw=1e15, lat=1e-12), objective, costs=costs)
        assert res.placement["op1"] == "d0"
        assert res.unsupported == {"d1": {"op1": "no attention rule"}}
        assert any("cannot run there" in n for n in res.notes)


def test_op_no_device_can_run_is_a_located_error():
    g = _chain(2)
    t = np.array([[1e-6, math.inf], [math.inf, math.inf]])
    costs = CostTable(ops=("op0", "op1"), devices=("d0", "d1"), time_s=t, dynamic_energy_j=t, idle_w=np.ones(2),
                      reasons={("op1", "d0"): "why0", ("op1", "d1"): "why1"})
    with pytest.raises(PartitionError, match=r"op 'op1': no device of node 'test2' can run it; got d0: why0; d1: why1"):
        partition(g, _node(2, [(0, 1)]), costs=costs)


def _pipeline_brute_force(prob):
    """Every split of the topological order into contiguous stages on distinct devices."""
    n, nd = prob.n_ops, prob.n_devices
    c = prob.costs
    best = math.inf
    for m in range(1, min(nd, n) + 1):
        for cuts in itertools.combinations(range(1, n), m - 1):
            bounds = [0, *cuts, n]
            for seq in itertools.permutations(range(nd), m):
                worst = 0.0
                for s in range(m):
                    worst = max(worst, float(c.time_s[bounds[s]:bounds[s + 1], seq[s]].sum()))
                    if s + 1 < m:
                        k = bounds[s + 1]
                        live = sum(t.nbytes for t in prob.tensors if t.producer < k <= t.consumers[-1])
                        a, b = seq[s], seq[s + 1]
                        if not prob.linked[a, b]:
                            worst = math.inf
                        elif live > 0:
                            worst = max(worst, prob.link_latency_s[a, b] + live * prob.link_inv_bw[a, b])
                best = min(best, worst)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_pipeline_dp_equals_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    g = _random_dag(rng, 7)
    nd = 2 + seed % 2
    links = [(0, 1), (1, 2)] if nd == 3 else [(0, 1)]
    node = _node(nd, links, bw=float(rng.uniform(1e8, 1e10)), lat=float(rng.uniform(1e-7, 1e-5)))
    prob = build_problem(g, node, _random_costs(rng, g, nd))
    bottleneck, stages, _ = solve_pipeline(prob)
    assert bottleneck == pytest.approx(_pipeline_brute_force(prob), rel=1e-9)
    assert stages[0].first == 0 and stages[-1].last == prob.n_ops - 1
    assert len({s.device for s in stages}) == len(stages)


def test_pipeline_hand_case_two_equal_halves_double_the_throughput():
    g = _chain(4, rows=8, cols=8)  # 128-byte tensors
    costs = _hand_costs(g, [1e-3] * 4, [1e-3] * 4)
    res = partition(g, _node(2, [(0, 1)], bw=128e6, lat=0.0), "throughput", costs=costs)
    # two stages of 2 ms; the cut moves 128 B at 128 MB/s = 1 us
    assert res.throughput_per_s == pytest.approx(1 / 2e-3)
    assert res.best_single_device_throughput_per_s == pytest.approx(1 / 4e-3)
    assert res.speedup == pytest.approx(2.0)
    assert [s.time_s for s in res.stages] == pytest.approx([2e-3, 2e-3])


def test_unknown_objective_is_a_located_error():
    with pytest.raises(PartitionError, match=r"--objective: unknown objective; got 'latncy'.*did you mean 'latency'"):
        check_objective("latncy")


def test_idle_policy_all_counts_every_device_and_unknown_policy_is_located():
    g = _chain(3)
    costs = _hand_costs(g, [5e-6, 10e-6, 5e-6], [50e-6, 2e-6, 50e-6])
    node = _node(2, [(0, 1)], bw=10e9, lat=1e-6)
    used = partition(g, node, "latency", costs=costs)
    every = partition(g, node, "latency", costs=costs, idle="all")
    assert set(used.placement.values()) == {"d0"}
    # dynamic energy is 100 J/s x 20 us; idle 10 W (d0) or 10 W + 1 W (d0 and d1) over 20 us
    assert used.energy_j == pytest.approx(100 * 20e-6 + 10 * 20e-6)
    assert every.energy_j == pytest.approx(100 * 20e-6 + 11 * 20e-6)
    with pytest.raises(PartitionError, match=r"--idle: unknown policy; got 'al'.*did you mean 'all'"):
        partition(g, node, "energy", costs=costs, idle="al")


@pytest.fixture(scope="module")
def h100_node():
    return load_node("h100-plus-systolic128")


def test_resnet50_on_h100_node_is_no_slower_than_the_gpu_alone_and_keys_present(h100_node):
    from workloads.resolve import load_workload

    g = load_workload("resnet50")
    res = partition(g, h100_node)
    js = res.to_json()
    for key in ("placement", "transfers", "latency_s", "energy_j", "best_single_device", "best_single_device_latency_s"):
        assert key in js
    assert set(js["placement"]) == {op.name for op in g}
    assert res.latency_s <= res.best_single_device_latency_s * (1 + 1e-12)
    assert res.exact
    # the reported latency is the sum of the placed ops' single-device costs plus the transfers
    single = res.single_device["gpu"]["latency_s"]
    assert res.best_single_device == "gpu" and single == res.best_single_device_latency_s


def test_cli_json_is_one_object_and_deterministic(capsys):
    args = ["partition", "resnet50", "--hardware", "h100-plus-systolic128", "--json"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first
    js = json.loads(first)
    assert js["node"] == "h100-plus-systolic128" and js["objective"] == "latency"
    assert js["devices"] == {"gpu": "h100-sxm5-80gb", "sa": "systolic-128x128-bf16", "cpu": "xeon-platinum-8480"}


@pytest.mark.parametrize("args,expect", [
    (["--hardware", "h100-plus-systolic128", "--objective", "speed"], "--objective: unknown objective; got 'speed'"),
    (["--hardware", "h100-plus-systolc128"], "did you mean 'h100-plus-systolic128' (a node)"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, args, expect):
    assert main(["partition", "resnet50", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err


def test_cli_node_with_link_to_unknown_device_exits_2(tmp_path, capsys):
    p = tmp_path / "n.toml"
    p.write_text('schema = 1\nname = "n"\ndescription = "d"\n[[devices]]\nname = "gpu"\nspec = "h100-sxm5-80gb"\n'
                 '[[devices]]\nname = "dla0"\nspec = "edge-64x64"\n'
                 '[[links]]\na = "gpu"\nb = "dla"\nkind = "pcie4"\n'
                 'bandwidth_bytes_per_s = { value = "31.5 GB/s", source = "s" }\nlatency_s = { value = "4 us", source = "s" }\n')
    assert main(["partition", "resnet50", "--hardware", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{p}: links[0] (gpu-dla).b: unknown device; got 'dla'; expected one of dla0, gpu; did you mean 'dla0'?" in err


def test_weights_beyond_a_device_memory_are_reported():
    from hwmodels.node import node_from_spec

    b = GraphBuilder("big", dtype="bf16")
    x = b.input("x", (1, 65536))
    w = b.weight("w", (65536, 65536))  # 8 GiB of bf16 weights
    b.op("matmul", [x, w], name="fc")
    res = partition(b.build(), node_from_spec(load_device("edge-64x64")))
    assert res.memory_bytes == {"edge-64x64": 65536 * 65536 * 2}
    assert any(n.startswith("memory: edge-64x64 hold 8.00 GiB of weights and caches, more than the 4.00 GiB")
               for n in res.notes)


def test_jetson_dlas_never_get_ops_they_cannot_run_and_the_reason_is_kept():
    from workloads.resolve import load_workload

    g = load_workload("bert-base", seq=128)
    res = partition(g, load_node("jetson-agx-orin-64gb"), "throughput")
    attention = [op.name for op in g if op.kind in ("attention", "layernorm")]
    assert attention
    for dla in ("dla0", "dla1"):
        assert set(attention) <= set(res.unsupported[dla])
        assert all(res.unsupported[dla][op] for op in attention)  # a reason for each
        assert not any(res.placement[op] == dla for op in res.unsupported[dla])


def test_heuristic_beyond_the_milp_size_is_between_the_optimum_and_the_best_single_device():
    rng = np.random.default_rng(7)
    b = GraphBuilder("ladder", dtype="bf16")  # a residual ladder: at most three live tensors, so the DP is exact
    outs = [b.input("x", (4, 256))]
    for i in range(70):  # more ops than MILP_MAX_OPS: a pruned DP falls back to the heuristic
        ins = [outs[-1], outs[-2]] if i % 3 == 2 else [outs[-1]]
        outs.append(b.op("elementwise", ins, name=f"op{i}", op="add" if len(ins) == 2 else "relu"))
    g = b.build()
    node = _node(3, [(0, 1), (1, 2), (0, 2)], bw=1e10, lat=2e-6)
    costs = _random_costs(rng, g, 3, p_unsupported=0.0)
    exact = partition(g, node, costs=costs)
    heur = partition(g, node, costs=costs, max_states=1)
    assert exact.exact and exact.method == "dp"
    assert not heur.exact and heur.method == "beam-dp+local-search"
    assert exact.latency_s <= heur.latency_s * (1 + 1e-12)
    assert heur.latency_s <= heur.best_single_device_latency_s * (1 + 1e-12)


def test_no_single_device_baseline_still_partitions_and_json_has_no_infinity():
    g = _chain(2, rows=8, cols=8)  # one 128-byte tensor between the two ops
    t = np.array([[1e-3, math.inf], [math.inf, 2e-3]])
    costs = CostTable(ops=("op0", "op1"), devices=("d0", "d1"), time_s=t, dynamic_energy_j=t, idle_w=np.ones(2),
                      reasons={("op0", "d1"): "a", ("op1", "d0"): "b"})
    node = _node(2, [(0, 1)], bw=128e6, lat=0.0)
    for objective in ("latency", "throughput"):
        res = partition(g, node, objective, costs=costs)
        assert res.placement == {"op0": "d0", "op1": "d1"}
        assert res.best_single_device == ""
        js = json.loads(json.dumps(res.to_json(), allow_nan=False))
        assert js["best_single_device_latency_s"] is None
    assert res.throughput_per_s == pytest.approx(1 / 2e-3)  # the 2 ms stage; the cut takes 1 us
    lat = partition(g, node, "latency", costs=costs)
    assert lat.latency_s == pytest.approx(1e-3 + 2e-3 + 128 / 128e6)

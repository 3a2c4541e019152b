"""Real-time scenarios on devices that share one DRAM and exchange data: kernels overlapping on two
devices of a pool divide its bandwidth max-min fairly (hand-computed fluid schedules), a job whose
predecessor ran on another device first receives its output over their link (chain latency by hand),
the bound stays at or above the simulated maximum on random scenarios with both on, and runs are
deterministic per seed."""

from __future__ import annotations

import json
import math
import random
import textwrap

import pytest

from hwmodels.node import NodeLink
from simulator.cli.main import main
from simulator.realtime.costing import (
    InputTransfer,
    MemoryPool,
    PoolSharing,
    TaskCost,
    Variant,
    memory_pools,
)
from simulator.realtime.rta import analyse, contended_work
from simulator.realtime.scenario import scenario_from_dict
from simulator.realtime.simulate import run_realtime, simulate_scenario

MS = 1e-3
GB = 1e9


def _task(name, prio, dev, **kw):
    return {"name": name, "model": "copy:bytes=1024", "device": dev, "priority": prio, **kw}


def _costs(scn, kernels, transfers=None):
    """TaskCost per task from ``kernels[name] = [(time ms, fixed ms, dram bytes, output bytes)...]`` (one
    variant) and ``transfers[name] = [(producer, NodeLink, dram factor)]``."""
    out = {}
    for t in scn.tasks:
        ks = kernels[t.name]
        v = Variant.of([k[0] * MS for k in ks], [k[1] * MS for k in ks], [k[2] for k in ks],
                       output_bytes=ks[-1][3] if len(ks[-1]) > 3 else 0.0)
        out[t.name] = TaskCost(t, t.device[0], {(): v}, {}, True)
    for name, xs in (transfers or {}).items():
        c = out[name]
        ins = tuple(InputTransfer(p, out[p].device, c.device, link, f, (out[p].variants[()].output_bytes,))
                    for p, link, f in xs)
        out[name] = TaskCost(c.task, c.device, c.variants, c.support, True, inputs=ins)
    return out


def _run(data, kernels, pools=(), transfers=None, frames=20, seed=0):
    scn = scenario_from_dict(data, where="case.toml")
    costs = _costs(scn, kernels, transfers)
    an = analyse(scn, costs, pools)
    specs = {d: d for d in dict.fromkeys(c.device for c in costs.values())}
    r = simulate_scenario(scn, costs, an, node_name="hand", device_specs=specs, frames=frames, seed=seed,
                          time_limit_s=60)
    return r, an


def _by(r):
    return {t.name: t for t in [*r.tasks, *r.chains]}


POOL = MemoryPool("dram", ("g", "d"), 100 * GB)


def test_two_memory_bound_kernels_on_two_devices_take_twice_as_long():
    # each task: one 1 ms kernel that alone moves 100 GB/s (1e8 bytes), released together every 10 ms on
    # its own device of a 100 GB/s pool: each gets 50 GB/s, so both end at 2 ms; without the pool 1 ms
    data = {"tasks": [_task("a", 1, "g", period="10 ms", deadline="10 ms"),
                      _task("b", 1, "d", period="10 ms", deadline="10 ms")]}
    k = {"a": [(1.0, 0.0, 1e8)], "b": [(1.0, 0.0, 1e8)]}
    r, an = _run(data, k, [POOL])
    by = _by(r)
    for n in ("a", "b"):
        assert by[n].stats.max_s == pytest.approx(2 * MS, rel=1e-12)
        assert by[n].stats.min_s == pytest.approx(2 * MS, rel=1e-12)
        # bound: the kernel at its worst share (half) beside the other device's largest demand
        assert by[n].wcrt_bound_s == pytest.approx(2 * MS, rel=1e-6)
        assert an.tasks[n].contention_s == pytest.approx(1 * MS)
    assert r.devices[0].stretch == pytest.approx(2.0) and r.devices[0].contended_s == pytest.approx(0.04, rel=1e-9)
    off, _ = _run(data, k, ())
    assert all(t.stats.max_s == pytest.approx(1 * MS, rel=1e-12) for t in off.tasks)
    assert all(t.wcrt_bound_s == pytest.approx(1 * MS, rel=1e-6) for t in off.tasks)


def test_fair_share_fixed_parts_and_a_lighter_kernel_by_hand():
    # a: 0.2 ms fixed, then 1 ms of work moving 100 GB/s; b: 1 ms of work moving 40 GB/s, then a second
    # kernel of 1 ms moving nothing (compute-bound). Timeline:
    #   0-0.2 ms: a in its fixed part (no DRAM), b alone at full speed (0.2 ms of its 1 ms done)
    #   0.2 ms on: b needs 40 GB/s < the 50 GB/s fair share, a gets the other 60 GB/s: speed 0.6
    #   b's first kernel ends at 1.0 ms; a did 0.8 x 0.6 = 0.48 ms of work by then; b's second kernel
    #   uses no DRAM: a runs at full speed and finishes its 0.52 ms left at 1.52 ms; b ends at 2.0 ms
    data = {"tasks": [_task("a", 1, "g", period="10 ms", deadline="10 ms"),
                      _task("b", 1, "d", period="10 ms", deadline="10 ms")]}
    k = {"a": [(1.2, 0.2, 1e8)], "b": [(1.0, 0.0, 4e7), (1.0, 0.0, 0.0)]}
    r, an = _run(data, k, [POOL], frames=5)
    by = _by(r)
    assert by["a"].stats.max_s == pytest.approx(1.52 * MS, rel=1e-9)
    assert by["b"].stats.max_s == pytest.approx(2.0 * MS, rel=1e-9)
    # bounds: a's work beside b's largest demand (40 GB/s) at 0.6: 0.2 + 1 / 0.6 ms; b never slowed
    assert by["a"].wcrt_bound_s == pytest.approx((0.2 + 1 / 0.6) * MS, rel=1e-6)
    assert by["b"].wcrt_bound_s == pytest.approx(2.0 * MS, rel=1e-6)


def test_busy_window_bound_charges_only_the_time_other_devices_can_be_busy():
    # a: ten 1 ms kernels each moving 100 GB/s on g; b: one such kernel on d; both every 50 ms, released
    # together. Simulated: both at half speed until b ends at 2 ms (a's first kernel done too), then a
    # alone for 9 ms: 11 ms. Kernel by kernel at the worst share a would be bounded by 20 ms; the busy
    # window bound charges a only for the time b can run beside it: b's one job (2 ms at worst) in a
    # window of 11 ms, at half speed, costs a 1 ms: w = 10 + 0.5 x 2 = 11 ms, met exactly
    data = {"tasks": [_task("a", 1, "g", period="50 ms", deadline="50 ms"),
                      _task("b", 1, "d", period="50 ms", deadline="50 ms")]}
    k = {"a": [(1.0, 0.0, 1e8)] * 10, "b": [(1.0, 0.0, 1e8)]}
    r, an = _run(data, k, [POOL], frames=4)
    by = _by(r)
    assert by["a"].stats.max_s == pytest.approx(11 * MS, rel=1e-9)
    assert by["b"].stats.max_s == pytest.approx(2 * MS, rel=1e-9)
    assert contended_work(_costs(scenario_from_dict(data), k), [POOL])["a"][0] == pytest.approx(20 * MS)
    assert by["a"].wcrt_bound_s == pytest.approx(11 * MS, rel=1e-6)
    assert by["b"].wcrt_bound_s == pytest.approx(2 * MS, rel=1e-6)
    assert an.tasks["a"].wcet_s == pytest.approx(20 * MS)  # worst-case work still reports the kernel-wise figure


def test_pool_sharing_is_max_min_fair_against_water_filling():
    rng = random.Random(7)
    sh = PoolSharing(MemoryPool("p", ("a", "b", "c", "d"), 100 * GB))
    for _ in range(200):
        n = rng.randint(1, 4)
        rates = [rng.choice([0.0, rng.uniform(1, 120) * GB]) for _ in range(n)]
        demand = [min(r, 100 * GB) for r in rates]
        # water filling by hand: sorted demands; each gets min(demand, equal share of what is left)
        alloc = [0.0] * n
        left, order = 100 * GB, sorted(range(n), key=lambda i: demand[i])
        for pos, i in enumerate(order):
            alloc[i] = min(demand[i], left / (n - pos))
            left -= alloc[i]
        got = sh.speeds(rates)
        for i in range(n):
            want = 1.0 if demand[i] == 0 else alloc[i] / demand[i]
            assert got[i] == pytest.approx(want, rel=1e-9, abs=1e-12), (rates, got)


def test_worst_case_inflation_is_m_times_the_memory_time_at_saturation():
    # m devices whose kernels all saturate the pool: each kernel's work part takes m x bytes / bandwidth
    for m in (2, 3, 4):
        devs = [f"e{i}" for i in range(m)]
        scn = scenario_from_dict({"tasks": [_task(d, 1, d, period="100 ms", deadline="100 ms") for d in devs]})
        costs = _costs(scn, {d: [(1.5, 0.5, 1e8)] for d in devs})  # 1 ms of work moving 1e8 B at 100 GB/s
        got = contended_work(costs, [MemoryPool("p", tuple(devs), 100 * GB)])
        for d in devs:
            assert got[d][0] == pytest.approx((0.5 + m * 1e8 / (100 * GB) * 1e3) * MS, rel=1e-9)


def test_a_transfer_runs_before_the_consumer_and_the_chain_pays_it():
    # a (1 ms on g) outputs 1 MB; b (2 ms on d) is released by a: it first receives the 1 MB over a
    # 1 GB/s link with 10 us latency (1.01 ms), so b responds in 3.01 ms and the chain a -> b takes
    # 1 + 1.01 + 2 = 4.01 ms, as does its bound (nothing else runs)
    link = NodeLink("g", "d", "pcie4", bandwidth_bytes_per_s=1 * GB, latency_s=10e-6)
    data = {"tasks": [_task("a", 2, "g", period="10 ms", deadline="10 ms"),
                      _task("b", 1, "d", after=["a"], deadline="10 ms")],
            "chains": [{"name": "ab", "tasks": ["a", "b"], "deadline": "10 ms"}]}
    k = {"a": [(1.0, 0.0, 0.0, 1e6)], "b": [(2.0, 0.0, 0.0)]}
    r, an = _run(data, k, transfers={"b": [("a", link, 0.0)]})
    by = _by(r)
    assert by["b"].stats.max_s == pytest.approx(3.01 * MS, rel=1e-9)
    assert by["ab"].stats.max_s == pytest.approx(4.01 * MS, rel=1e-9)
    assert by["ab"].stats.min_s == pytest.approx(4.01 * MS, rel=1e-9)
    assert by["ab"].wcrt_bound_s == pytest.approx(4.01 * MS, rel=1e-6)
    assert an.tasks["b"].transfer_s == pytest.approx(1.01 * MS, rel=1e-12)
    assert by["b"].transfer_s == pytest.approx(1.01 * MS, rel=1e-12)


def test_a_shared_memory_hand_off_contends_for_the_dram():
    # the hand-off of a's 1e8-byte output over a 100 GB/s shared-memory link moves 2e8 bytes in 1 ms
    # (read and written once) while c, on the third device, runs a 4 ms kernel moving 100 GB/s:
    # from 1 ms both want the whole pool and get half: the transfer ends at 3 ms, b's own 1 ms kernel
    # (no DRAM) at 4 ms; c did 1 + 1 = 2 ms of its work by 3 ms and its last 2 ms alone: ends at 5 ms
    link = NodeLink("g", "d", "shared-memory", bandwidth_bytes_per_s=100 * GB, latency_s=0.0)
    pool = MemoryPool("dram", ("g", "d", "x"), 100 * GB)
    data = {"tasks": [_task("a", 2, "g", period="20 ms", deadline="20 ms"),
                      _task("b", 1, "d", after=["a"], deadline="20 ms"),
                      _task("c", 1, "x", period="20 ms", deadline="20 ms")]}
    k = {"a": [(1.0, 0.0, 0.0, 1e8)], "b": [(1.0, 0.0, 0.0)], "c": [(4.0, 0.0, 4e8)]}
    r, _ = _run(data, k, [pool], transfers={"b": [("a", link, 2.0)]}, frames=4)
    by = _by(r)
    assert by["a"].stats.max_s == pytest.approx(1.0 * MS, rel=1e-9)  # a uses no DRAM: c never slows it
    assert by["b"].stats.max_s == pytest.approx(3.0 * MS, rel=1e-9)
    assert by["c"].stats.max_s == pytest.approx(5.0 * MS, rel=1e-9)
    for t in r.tasks:
        assert t.stats.max_s <= t.wcrt_bound_s


def _random_case(rng: random.Random):
    devs = ["d0", "d1", "d2"][: rng.randint(2, 3)]
    pool = MemoryPool("dram", tuple(devs), 100 * GB)
    link = NodeLink("x", "y", rng.choice(["shared-memory", "pcie4"]), bandwidth_bytes_per_s=rng.uniform(20, 100) * GB,
                    latency_s=rng.uniform(0, 50e-6))
    factor = 2.0 if link.kind == "shared-memory" else 0.0
    prios = rng.sample(range(1, 50), 10)
    tasks, kernels, transfers = [], {}, {}

    def ks(budget_ms):
        out = []
        n = rng.randint(1, 5)
        for _ in range(n):
            t = budget_ms / n * rng.uniform(0.5, 1.5)
            f = t * rng.choice([0.0, rng.uniform(0, 0.3)])
            rate = rng.choice([0.0, rng.uniform(10, 120)]) * GB
            out.append((t, f, rate * (t - f) * MS))
        return out

    for i in range(rng.randint(2, 4)):
        name = f"s{i}"
        period = rng.choice([4.0, 5.0, 8.0, 10.0, 20.0])
        dev = rng.choice(devs)
        t = _task(name, prios.pop(), dev, period=f"{period} ms", deadline=f"{period} ms")
        if rng.random() < 0.5:
            t["jitter"] = f"{rng.uniform(0, period / 2):.3f} ms"
        if rng.random() < 0.3:
            t["offset"] = f"{rng.uniform(0, period):.3f} ms"
        tasks.append(t)
        kernels[name] = ks(period * rng.uniform(0.05, 0.2))
        kernels[name][-1] = (*kernels[name][-1], rng.uniform(0, 2e6))
        if rng.random() < 0.7:
            succ, dev2 = f"{name}_next", rng.choice(devs)
            tasks.append(_task(succ, prios.pop(), dev2, after=[name], deadline=f"{3 * period} ms"))
            kernels[succ] = ks(period * rng.uniform(0.05, 0.15))
            if dev2 != dev:
                transfers[succ] = [(name, link, factor)]
    if rng.random() < 0.5:  # a sampler on another device reading the first source's output
        dev = rng.choice(devs)
        tasks.append(_task("sampler", prios.pop(), dev, after=["s0"], period="15 ms", deadline="45 ms"))
        kernels["sampler"] = ks(1.0)
        if dev != tasks[0]["device"]:
            transfers["sampler"] = [("s0", link, factor)]
    chains = [{"name": f"c_{t['name']}", "tasks": [t["after"][0], t["name"]], "deadline": "100 ms"}
              for t in tasks if t.get("after")]
    data = {"tasks": tasks}
    if chains:
        data["chains"] = chains
    return data, kernels, transfers, pool


@pytest.mark.parametrize("case", range(40))
def test_bound_covers_the_simulation_with_contention_and_transfers(case):
    rng = random.Random(5000 + case)
    data, kernels, transfers, pool = _random_case(rng)
    r, an = _run(data, kernels, [pool], transfers, frames=200, seed=case)
    checked = 0
    for t in [*r.tasks, *r.chains]:
        if t.stats.count and math.isfinite(t.wcrt_bound_s):
            assert t.stats.max_s <= t.wcrt_bound_s, (case, t.name, t.stats.max_s, t.wcrt_bound_s)
            checked += 1
    assert checked >= 1 or any(d.overloaded for d in r.devices)
    # contention only slows: never faster than the same scenario with devices on their own
    off, _ = _run(data, kernels, (), transfers, frames=200, seed=case)
    for a, b in zip(r.devices, off.devices, strict=True):
        assert a.busy_s >= b.busy_s * (1 - 1e-9) - 1e-12
        assert a.work_s == pytest.approx(b.work_s, rel=1e-9, abs=1e-12) or a.work_s >= b.work_s


# ------------------------------------------------------------------------------------------------
# the Jetson AGX Orin node: its shared LPDDR5 and its hand-off links

ORIN = """
name = "orin-pair"
frames = 30
seed = 0

[[tasks]]
name = "cam"
model = "elementwise:numel=4194304,op=mul,dtype=fp16"
device = "gpu"
rate = "30 Hz"
jitter = "3 ms"
deadline = "10 ms"
priority = 5

[[tasks]]
name = "det"
model = "elementwise:numel=4194304,op=add,dtype=fp16"
device = "dla0"
after = ["cam"]
deadline = "10 ms"
priority = 4

[[tasks]]
name = "seg"
model = "elementwise:numel=4194304,op=mul,dtype=fp16"
device = "dla1"
rate = "30 Hz"
deadline = "10 ms"
priority = 3
"""


@pytest.fixture()
def orin(tmp_path):
    p = tmp_path / "orin.toml"
    p.write_text(ORIN)
    return p


def test_orin_pool_and_transfer_use_the_catalog_numbers(orin):
    from simulator.realtime.costing import cost_scenario, resolve_node
    from simulator.realtime.scenario import load_scenario

    node = resolve_node("jetson-agx-orin-64gb")
    (pool,) = memory_pools(node)
    gpu = node.device("gpu").device
    assert pool.devices == ("gpu", "dla0", "dla1", "cpu")
    assert pool.bandwidth_bytes_per_s == pytest.approx(204.8e9 * 0.746)  # LPDDR5 x the module's measured read fraction (152.8 GB/s)
    assert pool.bandwidth_bytes_per_s == pytest.approx(gpu.main_memory.read_bandwidth_bytes_per_s
                                                       * gpu.efficiency.dram_bandwidth_fraction)
    costs = cost_scenario(load_scenario(orin), node)
    (x,) = costs["det"].inputs
    nbytes = 4194304 * 2  # the camera pass's fp16 output
    link = node.link("gpu", "dla0")
    assert (x.producer, x.src, x.dst, x.link.kind, x.dram_factor) == ("cam", "gpu", "dla0", "shared-memory", 2.0)
    # the partitioner's cost: 5 us + bytes / (102.4 GB/s x 0.746)
    assert x.worst_s == pytest.approx(5e-6 + nbytes / (102.4e9 * 0.746), rel=1e-12)
    assert x.worst_s == pytest.approx(link.transfer_time_s(nbytes), rel=1e-15)
    assert costs["det"].wcet_s == pytest.approx(costs["det"].own_wcet_s + x.worst_s, rel=1e-12)
    assert costs["seg"].inputs == () and costs["cam"].inputs == ()
    # a job of det: the transfer, then its own kernels, alone (cam is done): response = their sum
    r = run_realtime(orin, "jetson-agx-orin-64gb", frames=30, contention=False)
    det = next(t for t in r.tasks if t.name == "det")
    assert det.stats.max_s == pytest.approx(costs["det"].wcet_s, rel=1e-9)
    assert det.transfer_s == pytest.approx(x.worst_s)
    assert any(line.startswith("transfer: task det:") for line in r.report_lines)
    # without transfers, det takes its own work only
    r0 = run_realtime(orin, "jetson-agx-orin-64gb", frames=30, contention=False, transfers=False)
    assert next(t for t in r0.tasks if t.name == "det").stats.max_s == pytest.approx(costs["det"].own_wcet_s, rel=1e-9)


PAIR = """
[[tasks]]
name = "cam"
model = "elementwise:numel=4194304,op=mul,dtype=fp16"
device = "gpu"
rate = "30 Hz"
deadline = "10 ms"
[[tasks]]
name = "seg"
model = "elementwise:numel=4194304,op=mul,dtype=fp16"
device = "dla1"
rate = "30 Hz"
deadline = "10 ms"
"""


def test_orin_memory_bound_passes_on_gpu_and_dla_at_once_take_about_twice_as_long(tmp_path):
    # a memory-bound pass over 8 MiB on the GPU and one on DLA 1, released together every frame: each
    # alone moves nearly the whole LPDDR5 bandwidth, together they get half each. By hand from their
    # kernels: the GPU kernel's fixed part first (the DLA alone meanwhile), then both at their fair
    # share until the first ends, then the other alone
    from simulator.realtime.costing import cost_scenario, resolve_node
    from simulator.realtime.scenario import load_scenario

    p = tmp_path / "pair.toml"
    p.write_text(PAIR)
    node = resolve_node("jetson-agx-orin-64gb")
    (pool,) = memory_pools(node)
    bw = pool.bandwidth_bytes_per_s
    costs = cost_scenario(load_scenario(p), node)
    (tc,), (fc,), (rc,) = (getattr(costs["cam"].variants[()], f) for f in ("segments", "fixed", "dram_rate"))
    (ts,), (fs,), (rs,) = (getattr(costs["seg"].variants[()], f) for f in ("segments", "fixed", "dram_rate"))
    rc, rs = min(rc, bw), min(rs, bw)
    assert rc > bw / 2 and rs > bw / 2 and fs == 0 < fc < ts  # both memory-bound, each wants more than half
    sc, ss = bw / 2 / rc, bw / 2 / rs  # speeds at half the bandwidth each
    left_s = ts - fc  # the DLA ran alone during the GPU kernel's fixed part
    end_c, end_s = fc + (tc - fc) / sc, fc + left_s / ss
    if end_c < end_s:
        end_s = end_c + (left_s - (end_c - fc) * ss)
    else:
        end_c = end_s + ((tc - fc) - (end_s - fc) * sc)
    on = run_realtime(p, "jetson-agx-orin-64gb", frames=10)
    off = run_realtime(p, "jetson-agx-orin-64gb", frames=10, contention=False)
    by_on, by_off = ({t.name: t for t in r.tasks} for r in (on, off))
    assert by_on["cam"].stats.max_s == pytest.approx(end_c, rel=1e-9)
    assert by_on["seg"].stats.max_s == pytest.approx(end_s, rel=1e-9)
    assert by_on["cam"].stats.min_s == pytest.approx(end_c, rel=1e-9)  # every frame the same
    assert by_off["cam"].stats.max_s == pytest.approx(tc, rel=1e-9)
    assert by_off["seg"].stats.max_s == pytest.approx(ts, rel=1e-9)
    for n in ("cam", "seg"):  # about twice as long
        assert 1.9 < by_on[n].stats.max_s / by_off[n].stats.max_s <= 2.0 + 1e-9
        assert by_on[n].stats.max_s <= by_on[n].wcrt_bound_s
    assert any(line.startswith("contention: gpu, dla0, dla1, cpu share 152.8 GB/s") for line in on.report_lines)
    assert not any(line.startswith("contention:") for line in off.report_lines)
    devs = {d.name: d for d in on.devices}
    assert devs["dla1"].contended_s > 0 and devs["dla1"].stretch > 1.9
    assert all(d.contended_s == 0 and d.stretch == pytest.approx(1.0) for d in off.devices)


def test_same_seed_same_json_with_contention_and_transfers(orin):
    a = run_realtime(orin, "jetson-agx-orin-64gb", seed=4).to_json()
    assert a == run_realtime(orin, "jetson-agx-orin-64gb", seed=4).to_json()
    assert a != run_realtime(orin, "jetson-agx-orin-64gb", seed=5).to_json()


def test_cli_contention_and_transfers_flags(orin, capsys):
    assert main(["realtime", str(orin), "--hardware", "jetson-agx-orin-64gb", "--json"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert main(["realtime", str(orin), "--hardware", "jetson-agx-orin-64gb", "--json", "--contention", "off",
                 "--transfers", "off"]) == 0
    off = json.loads(capsys.readouterr().out)
    det_on = next(t for t in on["tasks"] if t["name"] == "det")
    det_off = next(t for t in off["tasks"] if t["name"] == "det")
    assert det_on["transfer_s"] > 0 and det_off["transfer_s"] == 0 and det_off["contention_s"] == 0
    assert det_on["wcet_s"] > det_off["wcet_s"]
    assert all(d["contended_s"] == 0 for d in off["devices"])
    with pytest.raises(SystemExit) as exc:
        main(["realtime", str(orin), "--hardware", "jetson-agx-orin-64gb", "--contention", "of"])
    assert exc.value.code == 2


def test_predecessor_on_an_unlinked_device_is_a_located_error(tmp_path, capsys):
    node = tmp_path / "two.toml"
    node.write_text(textwrap.dedent("""
        schema = 1
        name = "two-l4"
        description = "two L4 cards without a link"
        [[devices]]
        name = "g0"
        spec = "l4"
        [[devices]]
        name = "g1"
        spec = "l4"
    """))
    p = tmp_path / "s.toml"
    p.write_text(textwrap.dedent("""
        [[tasks]]
        name = "a"
        model = "copy:bytes=4096"
        device = "g0"
        rate = "10 Hz"
        deadline = "10 ms"
        [[tasks]]
        name = "b"
        model = "copy:bytes=4096"
        device = "g1"
        after = ["a"]
        deadline = "10 ms"
    """))
    assert main(["realtime", str(p), "--hardware", str(node)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{p}: tasks.b.after: 'a' runs on g0 and 'b' on g1, and node 'two-l4' has no link between them" in err
    assert "expected the two tasks on one device or on linked devices" in err
    # without transfers the same scenario runs (devices exchange data for free)
    assert main(["realtime", str(p), "--hardware", str(node), "--transfers", "off", "--frames", "5"]) == 0

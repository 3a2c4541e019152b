"""Sharing of one device by concurrent kernels: the fluid model (SM slots, bandwidth, power) and the DES on it.

Hand-computed cases first (synthetic kernels on a round-number device, then real ops on the test
GPUs), then invariants: capacities are never exceeded, one stream reproduces the analytical
engine exactly, energies add up.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import h100, toy_gpu  # noqa: E402

from hwmodels.catalog import load_device  # noqa: E402
from simulator import EvalOptions, evaluate, simulate  # noqa: E402
from simulator.engines.contention import (  # noqa: E402
    RESOURCES,
    DeviceCapacity,
    FluidDevice,
    KernelDemand,
    Running,
    run_concurrent,
    share,
)
from workloads.analysis import critical_path  # noqa: E402
from workloads.ir import GraphBuilder, OpGraph  # noqa: E402
from workloads.zoo import build_model  # noqa: E402

# 4 SMs x 32 CTAs, 1 TB/s DRAM, 4 TB/s L2, 50 GB/s host link per direction, 80 W dynamic budget
CAP = DeviceCapacity(name="round", units=4, max_ctas_per_sm=32, dram_bytes_per_s=1e12, l2_bytes_per_s=4e12,
                     host_bytes_per_s=50e9, power_budget_w=80.0)
MS = 1e-3


def kernel(name: str, time_ms: float = 1.0, work_ms: float | None = None, dram_gb: float = 0.0, sm: float = 0.1,
           **kw) -> KernelDemand:
    work = time_ms if work_ms is None else work_ms
    return KernelDemand(name, time_s=time_ms * MS, work_s=work * MS, dram_bytes=dram_gb * 1e9, sm_fraction=sm, **kw)


def ends_ms(result) -> list[float]:
    return [end / MS for _, end in result]


# the sharing model, by hand ---------------------------------------------------------------------


def test_a_kernel_alone_gets_what_it_needs_and_runs_at_speed_one():
    for d in (kernel("mem", dram_gb=1.0), kernel("gemm", sm=1.0, dram_gb=0.3, dynamic_energy_j=0.08),
              kernel("tail", sm=1.0, tail_sm_fraction=0.25, tail_work_fraction=0.5)):
        (s,) = share(CAP, [Running(d, done_s=0.5 * MS)])
        assert s.speed == 1.0 and s.limit == "" and s.held == d.need(0.5 * MS)
        assert s.dram_bytes_per_s == pytest.approx(d.dram_bytes / d.work_s, rel=1e-15)
    (s,) = share(CAP, [Running(kernel("prologue", time_ms=1.0, work_ms=0.5, dram_gb=0.5))])
    assert s.speed == 1.0 and s.limit == "fixed" and s.dram_bytes_per_s == 0.0
    # exactly its standalone time, through its phase ends
    k = kernel("k", time_ms=1.5, work_ms=1.0, dram_gb=1.0, sm=1.0, tail_sm_fraction=0.5, tail_work_fraction=0.25)
    assert run_concurrent(CAP, [(0.25 * MS, k)]) == [(0.25 * MS, 0.25 * MS + 1.5 * MS)]


def test_two_identical_memory_bound_kernels_take_twice_one():
    # each streams 1 GB in 1 ms: all of the 1 TB/s; together each gets half
    k = kernel("copy", dram_gb=1.0)
    assert ends_ms(run_concurrent(CAP, [(0.0, k)])) == [1.0]
    assert ends_ms(run_concurrent(CAP, [(0.0, k), (0.0, k)])) == pytest.approx([2.0, 2.0], rel=1e-12)
    # with a 0.1 ms fixed part (latency) each: the fixed parts overlap, the transfers do not
    k = kernel("copy", time_ms=1.1, work_ms=1.0, dram_gb=1.0)
    assert ends_ms(run_concurrent(CAP, [(0.0, k), (0.0, k)])) == pytest.approx([2.1, 2.1], rel=1e-12)
    s = share(CAP, [Running(k, 0.5 * MS, held=0.1, seq=0), Running(k, 0.5 * MS, held=0.1, seq=1)])
    assert [x.speed for x in s] == pytest.approx([0.5, 0.5], rel=1e-15)
    assert [x.limit for x in s] == ["dram", "dram"]
    assert sum(x.dram_bytes_per_s for x in s) == pytest.approx(CAP.dram_bytes_per_s, rel=1e-12)


def test_compute_bound_and_memory_bound_kernels_overlap():
    # compute-bound: 0.1 GB in 1 ms (10% of the DRAM); memory-bound: 1 GB in 1 ms; they fit on the
    # SMs together (0.5 + 0.1). Processor sharing: the compute-bound kernel gets its 10%, the other
    # the remaining 90% until the first ends at 1 ms, then all of it: 0.9 ms + 0.1 ms of work
    c = kernel("gemm", dram_gb=0.1, sm=0.5)
    m = kernel("stream", dram_gb=1.0, sm=0.1)
    s = share(CAP, [Running(c, held=0.5), Running(m, held=0.1, seq=1)])
    assert [x.speed for x in s] == pytest.approx([1.0, 0.9], rel=1e-12)
    assert [x.limit for x in s] == ["", "dram"]
    assert ends_ms(run_concurrent(CAP, [(0.0, c), (0.0, m)])) == pytest.approx([1.0, 1.1], rel=1e-12)
    # makespan 1.1 ms: close to max(1, 1) = 1, far from the sum 2


def test_kernels_sharing_sms_share_their_arithmetic():
    # occupancy 2: each grid takes one CTA on every SM (half the slots) and keeps every SM's math busy;
    # co-resident, they share the arithmetic: twice as long. On disjoint halves of the SMs: side by side.
    shared = kernel("gemm", sm=0.5, compute_fraction=1.0)
    assert ends_ms(run_concurrent(CAP, [(0.0, shared), (0.0, shared)])) == pytest.approx([2.0, 2.0], rel=1e-12)
    half = kernel("gemm", sm=0.5, compute_fraction=0.5)
    assert ends_ms(run_concurrent(CAP, [(0.0, half), (0.0, half)])) == [1.0, 1.0]
    s = share(CAP, [Running(shared, held=0.5), Running(shared, held=0.5, seq=1)])
    assert [x.limit for x in s] == ["compute", "compute"] and [x.speed for x in s] == [0.5, 0.5]
    # in a last wave on half the slots, the arithmetic spans half the SMs
    tail = kernel("t", sm=1.0, compute_fraction=1.0, tail_sm_fraction=0.5, tail_work_fraction=0.5)
    assert tail.per_speed(CAP, tail.need(0.75 * MS))["compute"] == 0.5


def test_a_full_grid_kernel_leaves_no_slots_until_its_last_wave():
    # A fills the device for 2 of its 3 waves (2 ms) and half of it in its last wave
    a = kernel("gemm", time_ms=3.0, sm=1.0, tail_sm_fraction=0.5, tail_work_fraction=1 / 3)
    small = kernel("small", sm=0.25)
    assert ends_ms(run_concurrent(CAP, [(0.0, a), (0.0, small)])) == pytest.approx([3.0, 3.0], rel=1e-12)
    (_, (start, _)) = run_concurrent(CAP, [(0.0, a), (0.0, small)])
    assert start == pytest.approx(2 * MS, rel=1e-12)  # waits for the tail wave
    # a kernel needing 0.75 of the device gets the free 0.5 in A's tail (speed 2/3), then all of it:
    # 2/3 ms of work by 3 ms, the last 1/3 ms at full speed
    wide = kernel("wide", sm=0.75)
    assert ends_ms(run_concurrent(CAP, [(0.0, a), (0.0, wide)])) == pytest.approx([3.0, 3.0 + 1 / 3], rel=1e-12)
    s = share(CAP, [Running(a, 2.5 * MS, held=1.0, phase=1), Running(wide, 0.0, held=0.0, seq=1)])
    assert [x.held for x in s] == [0.5, 0.5] and s[1].speed == pytest.approx(2 / 3) and s[1].limit == "sm"


def test_launch_geometry_gives_the_footprint_and_the_tail():
    rec = evaluate(_pair(), toy_gpu()).op("mm")  # any record; its geometry is replaced below
    cap = DeviceCapacity.of(toy_gpu())
    d = KernelDemand.from_record(replace(rec, ctas=10, ctas_per_sm=1), cap)  # 10 CTAs on 4 SMs: 2.5 waves
    assert (d.sm_fraction, d.tail_sm_fraction, d.tail_work_fraction) == (1.0, 0.5, pytest.approx(1 / 3))
    assert d.compute_fraction == pytest.approx(rec.compute_s / max(rec.compute_s, rec.memory_s), rel=1e-12)
    d = KernelDemand.from_record(replace(rec, ctas=6, ctas_per_sm=2), cap)  # 6 of 8 slots: one partial wave
    assert (d.sm_fraction, d.tail_work_fraction) == (0.75, 0.0)
    d = KernelDemand.from_record(replace(rec, ctas=2, ctas_per_sm=2, compute_s=rec.memory_s), cap)
    assert (d.sm_fraction, d.compute_fraction) == (0.25, 0.5)  # 2 CTAs: 2 of 4 SMs busy, a quarter of the slots
    d = KernelDemand.from_record(replace(rec, ctas=8, ctas_per_sm=1), cap)  # two whole waves: no tail
    assert (d.sm_fraction, d.tail_work_fraction) == (1.0, 0.0)
    # no geometry: the SM fraction its arithmetic keeps busy, at least one CTA slot
    d = KernelDemand.from_record(replace(rec, ctas=0, compute_s=rec.memory_s * 0.25), cap)
    assert d.sm_fraction == pytest.approx(0.25, rel=1e-12)
    d = KernelDemand.from_record(replace(rec, ctas=0, compute_s=0.0), cap)
    assert d.sm_fraction == cap.slot == 1 / (4 * 32)
    assert d.work_s == rec.memory_s and d.fixed_s == pytest.approx(rec.time_s - rec.memory_s)


def test_higher_priority_gets_freed_slots_first_without_preemption():
    a, b = kernel("a", sm=1.0), kernel("b", sm=1.0)
    c = kernel("c", sm=1.0, priority=-1)
    res = run_concurrent(CAP, [(0.0, a), (0.1 * MS, b), (0.2 * MS, c)])
    assert res == [(0.0, 1 * MS), (2 * MS, 3 * MS), (1 * MS, 2 * MS)]  # c before b, after a
    res = run_concurrent(CAP, [(0.0, a), (0.1 * MS, b), (0.2 * MS, replace(c, priority=0))])
    assert res == [(0.0, 1 * MS), (1 * MS, 2 * MS), (2 * MS, 3 * MS)]  # arrival order
    # submitted at the same instant, the urgent one starts first
    res = run_concurrent(CAP, [(0.0, a), (0.0, c)])
    assert res == [(1 * MS, 2 * MS), (0.0, 1 * MS)]
    # an urgent kernel arriving while a low-priority one runs waits for its end (no preemption)
    res = run_concurrent(CAP, [(0.0, a), (0.5 * MS, c)])
    assert res == [(0.0, 1 * MS), (1 * MS, 2 * MS)]


def test_concurrent_kernels_share_the_power_budget():
    # each draws 60 W at full speed (0.06 J in 1 ms); the budget is 80 W: each runs at 2/3 speed
    k = kernel("hot", sm=0.5, dynamic_energy_j=0.06)
    s = share(CAP, [Running(k, held=0.5), Running(k, held=0.5, seq=1)])
    assert [x.speed for x in s] == pytest.approx([2 / 3, 2 / 3], rel=1e-12)
    assert [x.limit for x in s] == ["power", "power"]
    assert sum(x.power_w for x in s) == pytest.approx(80.0, rel=1e-12)
    fluid = FluidDevice(CAP)
    fluid.add("a", k, 0.0)
    fluid.add("b", k, 0.0)
    t = 0.0
    while fluid.running:
        fluid.step(t)
        t = fluid.next_event_s() or t
    assert fluid.ends == {"a": pytest.approx(1.5 * MS), "b": pytest.approx(1.5 * MS)}
    # energy is conserved: 80 W for 1.5 ms = 2 x 0.06 J
    assert fluid.dynamic_w_max * 1.5 * MS == pytest.approx(2 * k.dynamic_energy_j, rel=1e-12)
    assert fluid.limited_s["power"] == pytest.approx(1.5 * MS)
    # without the cap they run side by side at full speed
    free = replace(CAP, power_budget_w=math.inf)
    assert ends_ms(run_concurrent(free, [(0.0, k), (0.0, k)])) == [1.0, 1.0]


def test_copies_run_on_the_copy_engines_and_share_the_host_link_per_direction():
    full = kernel("gemm", sm=1.0)
    h2d = KernelDemand("h2d", time_s=1 * MS, work_s=1 * MS, h2d_bytes=50e6, sm_fraction=0.0)  # 50 GB/s x 1 ms
    d2h = replace(h2d, name="d2h", h2d_bytes=0.0, d2h_bytes=50e6)
    assert ends_ms(run_concurrent(CAP, [(0.0, full), (0.0, h2d)])) == [1.0, 1.0]  # no SM slot needed
    assert ends_ms(run_concurrent(CAP, [(0.0, h2d), (0.0, h2d)])) == pytest.approx([2.0, 2.0], rel=1e-12)
    assert ends_ms(run_concurrent(CAP, [(0.0, h2d), (0.0, d2h)])) == [1.0, 1.0]  # one engine per direction


def test_shares_never_exceed_the_device():
    rng = random.Random(0)
    for _ in range(300):
        kernels = []
        for j in range(rng.randint(1, 6)):
            t = rng.uniform(0.1, 2.0)
            w = t * rng.choice([1.0, rng.uniform(0.0, 1.0)])
            sm = rng.choice([1.0, rng.uniform(0.01, 1.0), 0.0])
            tail = rng.choice([0.0, rng.uniform(0.05, 0.9)])
            d = KernelDemand(f"k{j}", time_s=t * MS, work_s=w * MS, dram_bytes=rng.uniform(0, 1.2e9) * w,
                             l2_bytes=rng.uniform(0, 5e9) * w, h2d_bytes=rng.choice([0.0, 60e6 * w]),
                             dynamic_energy_j=rng.uniform(0, 0.09) * t, sm_fraction=sm,
                             tail_sm_fraction=sm * rng.uniform(0.1, 1.0) if (tail and sm) else -1.0,
                             tail_work_fraction=tail if sm else 0.0, priority=rng.choice([0, 0, -1]))
            kernels.append(Running(d, done_s=rng.uniform(0, t) * MS, held=rng.choice([0.0, rng.uniform(0, 0.5)]),
                                   seq=j))
        total_held = sum(min(k.held, k.demand.need(k.done_s)) for k in kernels)
        if total_held > 1.0:
            continue  # not a reachable state
        shares = share(CAP, kernels)
        assert sum(s.held for s in shares) <= 1.0 + 1e-12
        assert sum(s.dram_bytes_per_s for s in shares) <= CAP.dram_bytes_per_s * (1 + 1e-9)
        assert sum(s.l2_bytes_per_s for s in shares) <= CAP.l2_bytes_per_s * (1 + 1e-9)
        fixed_w = sum(s.power_w for s in shares if s.limit == "fixed")
        assert sum(s.power_w for s in shares) <= max(CAP.power_budget_w, fixed_w) * (1 + 1e-9)
        used = dict.fromkeys(RESOURCES, 0.0)
        for k, s in zip(kernels, shares, strict=True):
            assert 0.0 <= s.speed <= 1.0
            assert s.held <= k.demand.need(k.done_s) + 1e-15
            assert s.held >= min(k.held, k.demand.need(k.done_s)) - 1e-15  # nothing is taken away
            if s.speed < 1.0 and s.limit not in ("waiting", "sm"):
                used[s.limit] = 1.0
        # every kernel held back by a resource is held back by a saturated one
        for res, flag in used.items():
            if not flag or res.startswith("host"):
                continue
            total = {"dram": sum(s.dram_bytes_per_s for s in shares) / CAP.dram_bytes_per_s,
                     "l2": sum(s.l2_bytes_per_s for s in shares) / CAP.l2_bytes_per_s,
                     "power": sum(s.power_w for s in shares) / CAP.power_budget_w}[res]
            assert total >= 1.0 - 1e-9 or res == "power"  # power: fixed parts may hold part of it


def test_bad_demands_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match=r"kernel 'k': work_s: got 2.0; expected at most time_s = 1.0"):
        KernelDemand("k", time_s=1.0, work_s=2.0)
    with pytest.raises(ValueError, match=r"sm_fraction: got 1.5; expected a fraction in \[0, 1\]"):
        KernelDemand("k", time_s=1.0, work_s=1.0, sm_fraction=1.5)
    with pytest.raises(ValueError, match=r"dram_bytes: got nan"):
        KernelDemand("k", time_s=1.0, work_s=1.0, dram_bytes=float("nan"))
    with pytest.raises(RuntimeError, match="can never run"):
        run_concurrent(replace(CAP, host_bytes_per_s=0.0),
                       [(0.0, KernelDemand("h2d", 1.0, 1.0, h2d_bytes=1.0, sm_fraction=0.0))])


# the discrete-event engine on real ops ----------------------------------------------------------


def _pair(m: int = 128, n: int = 128, k: int = 8192, elems: int = 2**20, second: str = "relu") -> OpGraph:
    """An independent matmul and elementwise op (or two elementwise ops when ``second`` is 'relu2')."""
    b = GraphBuilder("pair", dtype="bf16")
    x = b.input("x", (m, k))
    w = b.weight("w", (k, n))
    v = b.input("v", (elems,))
    b.op("matmul", [x, w], name="mm")
    b.op("elementwise", [v], name="act", op="relu")
    return b.build()


def _fan(n: int, elems: int) -> OpGraph:
    b = GraphBuilder("fan", dtype="bf16")
    for i in range(n):
        v = b.input(f"v{i}", (elems,))
        b.op("elementwise", [v], name=f"relu{i}", op="relu")
    return b.build()


def test_two_memory_bound_ops_on_two_streams_take_twice_one():
    dev = toy_gpu()  # 1 TB/s, no half-bandwidth size: a streaming op's memory time is bytes / 1 TB/s
    g = _fan(2, 64 * 2**20)
    ref = evaluate(g, dev)
    r0 = ref.op("relu0")
    t, work = r0.time_s, r0.memory_s
    fixed = t - work
    assert r0.bound == "memory" and fixed == pytest.approx(100e-9)  # the DRAM latency
    assert work == pytest.approx(r0.dram_bytes / 1e12, rel=1e-15)
    launch = dev.efficiency.launch_overhead_s  # relu1 arrives 2 us after relu0
    r2 = simulate(g, dev, streams=2)
    # relu0 alone from its work start (100 ns) until relu1's work starts (2.1 us), then both at half
    # speed until relu0 ends, then relu1 alone: relu0 ends at F + 2W - L, relu1 at F + 2W
    assert r2.op("relu0").end_s == pytest.approx(fixed + 2 * work - launch, rel=1e-12)
    assert r2.op("relu1").end_s == pytest.approx(fixed + 2 * work, rel=1e-12)
    assert r2.latency_s == pytest.approx(2 * t - fixed, rel=1e-12)  # ~2x one, not 1x
    assert r2.op("relu1").start_s == pytest.approx(launch, rel=1e-12)
    assert r2.op("relu0").time_s == pytest.approx(r2.op("relu0").end_s, rel=1e-12)
    assert r2.op("relu0").standalone_s == t
    # one stream: back to back, the same 2 transfers
    assert simulate(g, dev).latency_s == pytest.approx(2 * t, rel=1e-12)
    # energy: the same dynamic energy; idle power over the makespan; per-op energies add up
    assert r2.totals.dynamic_energy_j == pytest.approx(ref.totals.dynamic_energy_j, rel=1e-12)
    assert r2.totals.static_energy_j == pytest.approx(dev.power.idle_w * r2.latency_s, rel=1e-12)
    assert r2.energy_j == pytest.approx(sum(o.energy_j for o in r2.records), rel=1e-12)
    assert r2.provenance["contention"]["limited_s"]["dram"] == pytest.approx(2 * (work - launch), rel=1e-9)
    assert any("overlap" in w and "share" in w for w in r2.warnings)


def test_compute_bound_gemm_and_memory_bound_op_overlap():
    dev = h100()
    g = _pair(1024, 1024, 8192, 16 * 2**20)
    ref = evaluate(g, dev)
    mm, act = ref.op("mm"), ref.op("act")
    assert mm.bound == "compute" and act.bound == "memory"
    assert mm.ctas < dev.compute.units  # the GEMM leaves SMs free for the streaming kernel
    r = simulate(g, dev, streams=2)
    launch = dev.efficiency.launch_overhead_s
    assert r.op("act").start_s == pytest.approx(launch, rel=1e-12)  # runs beside the GEMM at once
    serial = mm.time_s + act.time_s
    assert max(mm.time_s, launch + act.time_s) < r.latency_s < 0.8 * serial
    assert r.op("mm").time_s > mm.time_s and r.op("act").time_s > act.time_s  # both share the DRAM
    assert r.provenance["contention"]["limited_s"]["dram"] > 0
    # the engine schedules exactly what the sharing model gives for these arrivals
    cap = DeviceCapacity.of(dev)
    fluid = run_concurrent(cap, [(0.0, KernelDemand.from_record(mm, cap)),
                                 (launch, KernelDemand.from_record(act, cap))])
    got = [x for n in ("mm", "act") for x in (r.op(n).start_s, r.op(n).end_s)]
    assert got == pytest.approx([x for pair in fluid for x in pair], rel=1e-12)
    assert r.energy_j == pytest.approx(sum(o.energy_j for o in r.records), rel=1e-12)


def test_small_op_waits_for_the_last_wave_of_a_full_grid_gemm():
    dev = h100()
    g = _pair(4096, 4096, 4096, 2**20)
    ref = evaluate(g, dev)
    mm = ref.op("mm")
    waves = mm.ctas / (dev.compute.units * mm.ctas_per_sm)
    assert 7 < waves < 8  # 8 waves, the last one 76% full
    work = max(mm.compute_s, mm.memory_s)
    tail_start = (mm.time_s - work) + work * 7 / 8
    r = simulate(g, dev, streams=2)
    assert r.op("act").ready_s == 0.0 and r.op("act").start_s == pytest.approx(tail_start, rel=1e-12)
    assert r.op("mm").end_s == pytest.approx(mm.time_s, rel=1e-12)  # the GEMM is not slowed
    assert r.op("act").time_s == ref.op("act").time_s  # DRAM 41% + 51%: room for both
    assert r.latency_s == pytest.approx(mm.time_s, rel=1e-12)


def _three_gemms() -> OpGraph:
    b = GraphBuilder("three", dtype="bf16")
    for name in ("big", "x", "y"):
        a = b.input(f"a_{name}", (2048, 2048))
        w = b.weight(f"w_{name}", (2048, 2048))
        b.op("matmul", [a, w], name=name)
    return b.build()


def test_stream_priorities_change_the_order():
    dev = toy_gpu()  # each 2048^3 GEMM fills the 4 SMs for 256 whole waves
    g = _three_gemms()
    t = evaluate(g, dev).op("x").time_s
    plain = simulate(g, dev, streams=3)
    assert [plain.op(n).start_s / t for n in ("big", "x", "y")] == pytest.approx([0, 1, 2], rel=1e-9)
    urgent = simulate(g, dev, streams=3, priorities={"y": -1})
    assert [urgent.op(n).start_s / t for n in ("big", "x", "y")] == pytest.approx([0, 2, 1], rel=1e-9)
    assert urgent.op("y").priority == -1 and urgent.op("x").priority == 0
    assert urgent.provenance["priorities"] == {"y": -1}
    # "big" runs first even at the lowest priority: it started before the others were launched
    late = simulate(g, dev, streams=3, priorities={"big": 5})
    assert late.op("big").start_s == 0.0
    assert urgent.latency_s == pytest.approx(plain.latency_s, rel=1e-12)


def test_priorities_by_group_and_bad_keys():
    g = build_model("inception_v3")
    r = simulate(g, h100(), streams=2, priorities={"Mixed_5b": -1})
    assert {o.priority for o in r.records if o.group == "Mixed_5b"} == {-1}
    assert {o.priority for o in r.records if o.group != "Mixed_5b"} == {0}
    with pytest.raises(ValueError, match=r"priorities: 'Mixed_5x': no op or group .*did you mean 'Mixed_5\w'"):
        simulate(g, h100(), streams=2, priorities={"Mixed_5x": 1})
    with pytest.raises(ValueError, match=r"priorities: 'Mixed_5b': not an integer; got 'high'"):
        simulate(g, h100(), streams=2, priorities={"Mixed_5b": "high"})


@pytest.mark.parametrize("opts", [EvalOptions(), EvalOptions(fusion=True, cuda_graphs=True)])
def test_one_stream_equals_the_analytical_engine_exactly(opts):
    g = build_model("resnet50")
    dev = load_device("h100-sxm5-80gb")
    ref = evaluate(g, dev, opts)
    r = simulate(g, dev, opts, streams=1)
    assert r.latency_s == pytest.approx(ref.latency_s, rel=1e-12)
    assert [o.time_s for o in r.records] == [o.time_s for o in ref.records]
    assert all(o.standalone_s == o.time_s for o in r.records)
    assert r.energy_j == pytest.approx(ref.energy_j, rel=1e-12)
    assert r.provenance["contention"]["slowed_ops"] == 0


def test_multi_stream_zoo_graph_stays_consistent():
    g = build_model("inception_v3")
    dev = h100()
    one = simulate(g, dev)
    _, cp = critical_path(g, weight=lambda op: one.op(op.name).time_s)
    for s in (2, 4):
        r = simulate(g, dev, streams=s)
        assert cp * (1 - 1e-12) <= r.latency_s <= one.latency_s * (1 + 1e-12)
        for o in r.records:
            assert o.time_s >= o.standalone_s * (1 - 1e-9)  # sharing never speeds an op up
            assert o.end_s == pytest.approx(o.start_s + o.time_s, rel=1e-12, abs=1e-18)
        assert r.energy_j == pytest.approx(sum(o.energy_j for o in r.records), rel=1e-12)
        assert r.totals.dynamic_energy_j == pytest.approx(one.totals.dynamic_energy_j, rel=1e-12)
        assert r.totals.static_energy_j == pytest.approx(dev.power.idle_w * r.latency_s, rel=1e-12)

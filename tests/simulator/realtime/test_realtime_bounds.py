"""Real-time scheduling and its bound: hand-computed schedules, the response-time analysis by hand, and
the simulated maximum never above the bound over many random task sets (kernel times given directly)."""

from __future__ import annotations

import math
import random

import pytest

from simulator.realtime.costing import TaskCost, Variant
from simulator.realtime.rta import analyse, response_time
from simulator.realtime.scenario import poisson_quantile, scenario_from_dict
from simulator.realtime.simulate import simulate_scenario

MS = 1e-3


def _run(data, kernels, devices, frames=200, seed=0):
    """Simulate ``data`` with each task's kernels given (ms) instead of costed; ``kernels[name]`` is a
    list of kernel times, or a dict {value: list} for a task sized by one variable."""
    scn = scenario_from_dict(data, where="case.toml")
    costs = {}
    for t in scn.tasks:
        k = kernels[t.name]
        if isinstance(k, dict):
            variants = {(v,): Variant.of([x * MS for x in ks]) for v, ks in k.items()}
            support = {t.variables[0]: tuple(sorted(k))}
        else:
            variants, support = {(): Variant.of([x * MS for x in k])}, {}
        costs[t.name] = TaskCost(t, devices[t.name], variants, support, True)
    analysis = analyse(scn, costs)
    specs = {d: d for d in dict.fromkeys(devices.values())}
    return simulate_scenario(scn, costs, analysis, node_name="hand", device_specs=specs, frames=frames, seed=seed,
                             time_limit_s=60), analysis


def _task(name, prio, **kw):
    return {"name": name, "model": "copy:bytes=1024", "device": "d0", "priority": prio, **kw}


def test_two_tasks_by_hand_blocking_and_preemption_at_kernel_boundaries():
    # A: one 2 ms kernel every 5 ms (released 0.5 ms after B), above B: three 1 ms kernels every 10 ms
    data = {"tasks": [_task("a", 2, period="5 ms", offset="0.5 ms", deadline="5 ms"),
                      _task("b", 1, period="10 ms", deadline="10 ms")]}
    r, an = _run(data, {"a": [2.0], "b": [1.0, 1.0, 1.0]}, {"a": "d0", "b": "d0"}, frames=20)
    a, b = (next(t for t in r.tasks if t.name == n) for n in ("a", "b"))
    # b's first kernel runs 0-1 ms; a (released at 0.5) waits for it: 1-3 ms, response 2.5 ms;
    # b resumes 3-5 ms and finishes before a's next release at 5.5 ms: response 5 ms
    assert a.stats.max_s == pytest.approx(2.5 * MS, abs=1e-12)
    assert a.stats.min_s == pytest.approx(2.0 * MS, abs=1e-12)  # later jobs of a find b done: no blocking
    assert b.stats.max_s == pytest.approx(5.0 * MS, abs=1e-12)
    # bounds by hand: R_a = B + C = 1 + 2 = 3 ms; R_b = 3 + ceil(R_b / 5) 2 -> 5 ms
    assert an.tasks["a"].blocking_s == pytest.approx(1.0 * MS)
    assert a.wcrt_bound_s == pytest.approx(3.0 * MS)
    assert b.wcrt_bound_s == pytest.approx(5.0 * MS)
    assert an.utilisation["d0"] == pytest.approx(2 / 5 + 3 / 10)
    # 20 frames of the fastest source (5 ms): 100 ms, a 20 jobs and b 10, each device-busy 70% of the time
    assert (a.stats.count, b.stats.count) == (20, 10)
    assert r.devices[0].utilisation == pytest.approx(0.7, rel=1e-9)


def test_a_kernel_in_flight_is_never_cut():
    # b is one 3 ms kernel: a (released at 0.5 ms) waits until 3 ms, response 2.5 + 2 = 4.5 ms; bound 3 + 2 = 5
    data = {"tasks": [_task("a", 2, period="10 ms", offset="0.5 ms", deadline="10 ms"),
                      _task("b", 1, period="10 ms", deadline="10 ms")]}
    r, _ = _run(data, {"a": [2.0], "b": [3.0]}, {"a": "d0", "b": "d0"}, frames=5)
    a = r.tasks[0]
    assert a.stats.max_s == pytest.approx(4.5 * MS, abs=1e-12)
    assert a.wcrt_bound_s == pytest.approx(5.0 * MS)


def test_response_time_analysis_by_hand():
    # C=3, T=10 below (C=2, T=5) and (C=1, T=4): w = 3 + ceil(w/5) 2 + ceil(w/4) 1;
    # iterate: w0 = 3+2+1 = 6; w1 = 3 + 2*2 + 2*1 = 9; w2 = 3 + 2*2 + 3*1 = 10; w3 = 3 + 2*2 + 3*1 = 10.
    # The busy period L = ceil(L/10) 3 + ceil(L/5) 2 + ceil(L/4) 1 is also 10: one job of the task in it
    rel, arr, q = response_time(3.0, 10.0, 0.0, 0.0, [(2.0, 5.0, 0.0), (1.0, 4.0, 0.0)])
    assert (rel, arr, q) == (10.0, 10.0, 1)
    # with 1 of blocking and 1 of jitter on the T=5 task: w = 4 + ceil((w+1)/5) 2 + ceil(w/4):
    # 7 -> 4 + 4 + 2 = 10 -> 4 + 6 + 3 = 13 -> 4 + 6 + 4 = 14 -> 14
    rel, _, _ = response_time(3.0, 20.0, 0.0, 1.0, [(2.0, 5.0, 1.0), (1.0, 4.0, 0.0)])
    assert rel == 14.0
    # utilisation 1 or more: no bound
    assert math.isinf(response_time(3.0, 6.0, 0.0, 0.0, [(3.0, 6.0, 0.0)])[0])


def test_busy_period_with_several_jobs_of_the_task():
    # C=3.5, T=6 below (C=3, T=7): U = 0.583 + 0.429 >= 1: no bound
    assert math.isinf(response_time(3.5, 6.0, 0.0, 0.0, [(3.0, 7.0, 0.0)])[0])
    # C=2, T=6 below (C=3, T=7): L = ceil(L/6) 2 + ceil(L/7) 3 = 5: one job, R = 5
    rel, _, q = response_time(2.0, 6.0, 0.0, 0.0, [(3.0, 7.0, 0.0)])
    assert (rel, q) == (5.0, 1)
    # C=4, T=9 below (C=3, T=6), U = 0.944: L = ceil(L/9) 4 + ceil(L/6) 3: 7 -> 10 -> 14 -> 17 -> 17,
    # Q = ceil(17/9) = 2 jobs; w(0) = 4 + ceil(w/6) 3: 7 -> 10 -> 10, R0 = 10;
    # w(1) = 8 + ceil(w/6) 3 from 14: 17 -> 17, R1 = 17 - 9 = 8
    rel, _, q = response_time(4.0, 9.0, 0.0, 0.0, [(3.0, 6.0, 0.0)])
    assert (rel, q) == (10.0, 2)
    # jitter 2 on the task itself: L = ceil((L+2)/9) 4 + ceil(L/6) 3: 7 -> 10 -> 14 -> 17 -> 21 -> 24 -> 24,
    # Q = ceil(26/9) = 3; w = 10, 17, 24: from release max(10, 17-9+2, 24-18+2) = 10, from arrival 10 + 2 = 12
    assert response_time(4.0, 9.0, 2.0, 0.0, [(3.0, 6.0, 0.0)]) == (10.0, 12.0, 3)


def _random_case(rng: random.Random):
    n_dev = rng.choice([1, 1, 2])
    devs = [f"d{i}" for i in range(n_dev)]
    n_src = rng.randint(1, 3)
    tasks, kernels, placed = [], {}, {}
    names = []
    budget = {d: rng.uniform(0.3, 0.95) for d in devs}
    use = dict.fromkeys(devs, 0.0)
    prios = rng.sample(range(1, 50), 8)
    variables = {}
    for i in range(n_src):
        name = f"s{i}"
        period = rng.choice([4.0, 5.0, 8.0, 10.0, 12.5, 20.0])
        dev = rng.choice(devs)
        share = budget[dev] * rng.uniform(0.1, 0.5)
        c = max(0.05, share * period)
        nk = rng.randint(1, 6)
        ks = [c * w for w in _split(rng, nk)]
        t = _task(name, prios.pop(), period=f"{period} ms", deadline=f"{period} ms", device=dev)
        if rng.random() < 0.5:
            t["jitter"] = f"{rng.uniform(0, period / 2):.3f} ms"
        if rng.random() < 0.3:
            t.pop("period")
            t["min_interarrival"] = f"{period} ms"
            t["max_interarrival"] = f"{period * rng.uniform(1, 2):.3f} ms"
        if rng.random() < 0.3:
            t["offset"] = f"{rng.uniform(0, period):.3f} ms"
        tasks.append(t)
        kernels[name], placed[name] = ks, dev
        use[dev] += c / period
        names.append((name, period))
        # a data-driven successor, sometimes sized by a variable of the source
        if rng.random() < 0.7:
            succ = f"{name}_next"
            dev2 = rng.choice(devs)
            c2 = max(0.05, budget[dev2] * rng.uniform(0.05, 0.3) * period)
            t2 = _task(succ, prios.pop(), after=[name], deadline=f"{2 * period} ms", device=dev2)
            if rng.random() < 0.5:
                var = f"n{i}"
                hi = rng.randint(1, 6)
                variables[var] = {"distribution": "uniform", "low": 1, "high": hi, "produced_by": name}
                t2["batch"] = f"{{{var}}}"
                kernels[succ] = {v: [c2 * v / hi * w for w in _split(rng, rng.randint(1, 4))] for v in range(1, hi + 1)}
            else:
                kernels[succ] = [c2 * w for w in _split(rng, rng.randint(1, 4))]
            tasks.append(t2)
            placed[succ] = dev2
    # a time-driven sampler of the first source's chain
    if rng.random() < 0.5:
        src = tasks[0]["name"]
        dev = rng.choice(devs)
        tasks.append(_task("sampler", prios.pop(), after=[src], period="15 ms", deadline="30 ms", device=dev))
        kernels["sampler"], placed["sampler"] = [0.4, 0.3], dev
    data = {"tasks": tasks}
    if variables:
        data["variables"] = variables
    chains = []
    for t in tasks:
        if t["name"].endswith("_next"):
            chains.append({"name": f"c_{t['name']}", "tasks": [t["after"][0], t["name"]], "deadline": "100 ms"})
        if t["name"] == "sampler":
            chains.append({"name": "c_sampler", "tasks": [t["after"][0], "sampler"], "deadline": "100 ms"})
    if chains:
        data["chains"] = chains
    return data, kernels, placed


def _split(rng: random.Random, n: int) -> list[float]:
    w = [rng.uniform(0.2, 1.0) for _ in range(n)]
    s = sum(w)
    return [x / s for x in w]


@pytest.mark.parametrize("case", range(60))
def test_simulated_maximum_never_exceeds_the_bound(case):
    rng = random.Random(1000 + case)
    data, kernels, placed = _random_case(rng)
    r, _ = _run(data, kernels, placed, frames=300, seed=case)
    checked = 0
    for t in [*r.tasks, *r.chains]:
        if t.stats.count and math.isfinite(t.wcrt_bound_s):
            assert t.stats.max_s <= t.wcrt_bound_s, (case, t.name, t.stats.max_s, t.wcrt_bound_s)
            checked += 1
    assert checked >= 1 or any(d.overloaded for d in r.devices)  # all unbounded only when overloaded


def test_bound_is_tight_for_a_synchronous_release():
    # three tasks released together at 0 with no jitter: the simulated first jobs hit the critical instant,
    # so the top task's bound (its blocking cannot happen at 0) is C, and the others meet theirs exactly
    data = {"tasks": [_task("hi", 3, period="4 ms", deadline="4 ms"),
                      _task("mid", 2, period="6 ms", deadline="6 ms"),
                      _task("lo", 1, period="12 ms", deadline="12 ms")]}
    r, _ = _run(data, {"hi": [1.0], "mid": [0.5, 0.5], "lo": [1.0, 1.0]}, {n: "d0" for n in ("hi", "mid", "lo")},
                frames=30)
    by = {t.name: t for t in r.tasks}
    # lo: w = 2 + ceil(w/4) 1 + ceil(w/6) 1 -> 4 -> 4: bound 4 ms, simulated 4 ms at time 0
    assert by["lo"].wcrt_bound_s == pytest.approx(4 * MS)
    assert by["lo"].stats.max_s == pytest.approx(4 * MS, abs=1e-12)
    # mid: B = 1 (lo's kernel), w = 1 + 1 + ceil(w/4) 1 -> 3: bound 3 ms; simulated 2 ms (no lo kernel at 0)
    assert by["mid"].wcrt_bound_s == pytest.approx(3 * MS)
    assert by["mid"].stats.max_s == pytest.approx(2 * MS, abs=1e-12)


def test_overload_is_reported_and_simulated_with_misses():
    data = {"tasks": [_task("a", 2, period="5 ms", deadline="5 ms"), _task("b", 1, period="10 ms", deadline="10 ms")]}
    r, an = _run(data, {"a": [3.0], "b": [5.0]}, {"a": "d0", "b": "d0"}, frames=100)
    assert an.utilisation["d0"] == pytest.approx(1.1)
    assert r.devices[0].overloaded
    assert any(line.startswith("overload: device d0: utilisation at worst-case work 110.0% > 100%")
               for line in r.report_lines)
    b = next(t for t in r.tasks if t.name == "b")
    assert math.isinf(b.wcrt_bound_s)
    assert b.stats.deadline_misses > 0 and b.stats.count == 50  # every released job still runs
    a = next(t for t in r.tasks if t.name == "a")
    # a keeps a finite bound (5 ms of blocking by b's kernel + its own 3 ms) and meets it, missing its 5 ms deadline
    assert a.wcrt_bound_s == pytest.approx(8 * MS) and a.stats.max_s == pytest.approx(8 * MS, abs=1e-12)
    assert a.stats.count == 100 and a.stats.deadline_misses > 0


def test_poisson_quantile_matches_scipy():
    from scipy.stats import poisson

    for mean in (0.3, 2.0, 8.0, 12.0, 40.0):
        for q in (0.5, 0.9, 0.999, 0.9999):
            assert poisson_quantile(mean, q) == int(poisson.ppf(q, mean))

"""The public evaluate routes a parallel plan to simulator.parallel; the engines refuse one."""

from __future__ import annotations

import pytest

import simulator
from simulator.engines import analytical, vectorized
from simulator.front import evaluate, evaluate_variants
from simulator.hardware import load_hardware
from simulator.parallel import evaluate_plan
from workloads.parallel import ParallelPlan
from workloads.resolve import load_workload

DGX = load_hardware("dgx-h100")
BW = "memory.hbm.read_bandwidth_bytes_per_s"


@pytest.fixture(scope="module")
def decode():
    return load_workload("llama-2-7b", phase="decode", batch=4, context=512)


def test_simulator_evaluate_is_the_front_and_routes_a_plan(decode) -> None:
    assert simulator.evaluate is evaluate
    r = simulator.evaluate(decode, DGX, simulator.EvalOptions(plan=ParallelPlan(tp=2)))
    direct = evaluate_plan("llama-2-7b", DGX, ParallelPlan(tp=2), phase="decode", context=512, batch=4)
    assert r.totals.latency_s == direct.latency_s and r.parallel is not None


def test_without_a_plan_the_front_is_the_engine(decode) -> None:
    assert evaluate(decode, DGX).to_json() == analytical.evaluate(decode, DGX).to_json()


def test_the_engines_refuse_a_plan(decode) -> None:
    opts = simulator.EvalOptions(plan=ParallelPlan(tp=2))
    with pytest.raises(ValueError, match=r"evaluate: options.plan: .*simulator.evaluate"):
        analytical.evaluate(decode, DGX, opts)
    with pytest.raises(ValueError, match=r"evaluate_variants: options.plan: "):
        vectorized.evaluate_variants(decode, DGX, {BW: [2e12, 4e12]}, opts)


def test_variants_with_a_plan_are_evaluated_one_by_one(decode) -> None:
    from hwmodels.paths import with_overrides

    opts = simulator.EvalOptions(plan=ParallelPlan(tp=2))
    res = evaluate_variants(decode, DGX, {BW: [2e12, 4e12]}, opts)
    assert res.method == "per-variant" and "plan" in res.reason
    for i, bw in enumerate((2e12, 4e12)):
        one = evaluate(decode, with_overrides(DGX, {BW: bw}), opts)
        assert res.latency_s[i] == one.totals.latency_s
    assert res.latency_s[0] > res.latency_s[1]  # a decode step is bandwidth-bound: more bandwidth, faster

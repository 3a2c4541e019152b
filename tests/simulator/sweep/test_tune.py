"""`simulator.sweep.tune` and the model tuning problem: constraint parsing, search space, exhaustive
search against brute force with the analytical engine, memory pruning, the JSON contract."""

from __future__ import annotations

import itertools
import logging
import math

import pytest

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from simulator.sweep.tune import (
    Axis,
    Constraint,
    SearchSpace,
    TuneError,
    _fit_reason,
    parse_constraint,
    tune,
)
from simulator.sweep.tune_model import ModelProblem, load_prices
from workloads.resolve import load_workload

GiB = 2.0**30


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("simulator").setLevel(logging.ERROR)


# ------------------------------------------------------------------------------------------ constraints


@pytest.mark.parametrize(("text", "metric", "op", "value"), [
    ("ttft_s<=0.2", "ttft_s", "<=", 0.2),
    ("ttft_s <= 200 ms", "ttft_s", "<=", 0.2),
    ("tpot_s<50 us", "tpot_s", "<", 50e-6),
    ("memory_per_device<=80 GiB", "memory_per_device", "<=", 80 * GiB),
    ("memory_per_device<=80 GB", "memory_per_device", "<=", 80e9),
    ("power_w<=700 W", "power_w", "<=", 700.0),
    ("power_w<=0.7 kW", "power_w", "<=", 700.0),
    ("energy_j<5 kJ", "energy_j", "<", 5000.0),
    ("throughput_per_s>=1000", "throughput_per_s", ">=", 1000.0),
    ("cost_per_hour<=$40/h", "cost_per_hour", "<=", 40.0),
    ("pes>4096", "pes", ">", 4096.0),
])
def test_constraint_values_in_si_units(text: str, metric: str, op: str, value: float) -> None:
    c = parse_constraint(text)
    assert (c.metric, c.op, c.reference) == (metric, op, "")
    assert c.value == pytest.approx(value, rel=1e-12)


def test_constraint_relative_to_capacity() -> None:
    c = parse_constraint("memory_per_device<=0.9*capacity")
    assert (c.metric, c.op, c.value, c.reference) == ("memory_per_device", "<=", 0.9, "capacity")
    assert c.bound({"capacity": 80e9}) == pytest.approx(72e9)
    assert c.holds({"memory_per_device": 71e9, "capacity": 80e9})
    assert not c.holds({"memory_per_device": 73e9, "capacity": 80e9})
    assert parse_constraint("memory_per_device <= capacity").value == 1.0


@pytest.mark.parametrize(("text", "needle"), [
    ("ttft<=0.2", "did you mean 'ttft_s'"),
    ("ttft_s=0.2", "operator '='"),
    ("ttft_s==0.2", "operator '=='"),
    ("ttft_s 0.2", "malformed constraint"),
    ("<=0.2", "malformed constraint"),
    ("ttft_s<=", "missing value"),
    ("ttft_s<=0.2 GiB", "wrong dimension"),
    ("ttft_s<=0.2 parsecs", "unknown unit"),
    ("power_w<=0.9*capacity", "cannot scale a bound of power_w"),
    ("memory_per_device<=0.9*capcity", "did you mean 'capacity'"),
    ("memory_per_device<=-1*capacity", "factor of capacity must be positive"),
    ("energy_j<=3 W", "not a unit of energy_j"),
    ("latency_s<=-1 ms", "negative bound; got '-1 ms'; expected a value >= 0"),  # every configuration rejected, exit 1
    ("throughput_per_s>=-5", "negative bound"),
    ("__import__('os')<=1", "malformed constraint"),
])
def test_bad_constraints_are_one_located_line(text: str, needle: str) -> None:
    with pytest.raises(TuneError) as err:
        parse_constraint(text)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg
    assert msg.startswith(f"--constraint {text!r}")


def test_constraint_on_a_metric_the_search_does_not_produce() -> None:
    with pytest.raises(TuneError, match="is not produced by this search"):
        parse_constraint("ttft_s<=0.2", {"latency_s", "power_w"})


def test_reasons_say_by_how_much() -> None:
    c = parse_constraint("ttft_s<=0.2")
    assert c.reason({"ttft_s": 0.2351}) == "misses the SLO ttft_s<=0.2 by 35.1 ms (predicted 235.1 ms)"
    assert c.violation({"ttft_s": 0.25}) == pytest.approx(0.25)
    assert c.violation({"ttft_s": 0.1}) == 0.0
    p = parse_constraint("power_w<=700")
    assert p.reason({"power_w": 812.0}) == "breaks power_w<=700: 812 W, limit 700 W (112 W over)"
    assert _fit_reason(93.2 * GiB, 80 * GiB) == "does not fit: needs 93.2 GiB, has 80.0 GiB (13.2 GiB over)"
    lo = Constraint("throughput_per_s", ">=", 1000.0, text="throughput_per_s>=1000")
    assert "(100 /s under)" in lo.reason({"throughput_per_s": 900.0})


# ------------------------------------------------------------------------------------------ space


def test_space_indexing_is_mixed_radix_last_axis_fastest() -> None:
    s = SearchSpace((Axis("a", (1, 2, 3), numeric=True), Axis("b", ("x", "y")), Axis("c", (True, False))))
    assert s.size == 12
    assert [s.config(i) for i in (0, 1, 2, 11)] == [
        {"a": 1, "b": "x", "c": True}, {"a": 1, "b": "x", "c": False}, {"a": 1, "b": "y", "c": True},
        {"a": 3, "b": "y", "c": False}]
    for i in range(s.size):
        assert s.index(s.coords(i)) == i
    f = s.features([0, 11])
    # a: log position 0 and 1; b and c one-hot scaled so two different values are at distance 1
    assert f[0, 0] == 0.0 and f[1, 0] == 1.0
    assert math.dist(f[0, 1:], f[1, 1:]) == pytest.approx(math.sqrt(2.0))
    with pytest.raises(TuneError, match="has no values"):
        Axis("batch", ())


# ------------------------------------------------------------------------------------------ model problem


def _brute_force(model: str, hardware: list[str], batches: tuple[int, ...], dtypes: tuple[str, ...],
                 fusions: tuple[bool, ...], seq: int, ok: object) -> list[tuple[float, dict[str, object]]]:
    """Every configuration through ``evaluate`` directly; (latency, config) of those meeting ``ok``."""
    out = []
    for hw_name, b, dt, fu in itertools.product(hardware, batches, dtypes, fusions):
        hw = load_hardware(hw_name)
        g = load_workload(model, batch=b, seq=seq, dtype=dt)
        try:
            rep = evaluate(g, hw, EvalOptions(fusion=fu, allow_tf32=dt == "tf32"))
        except ValueError:  # no tensor rate for this dtype on this device
            continue
        if rep.memory.fits and ok(rep):  # type: ignore[operator]
            out.append((rep.totals.latency_s, {"hardware": hw_name, "batch": b, "dtype": dt, "fusion": fu}))
    return sorted(out, key=lambda x: x[0])


def test_exhaustive_search_equals_brute_force_with_evaluate() -> None:
    hardware = ["h100-sxm5-80gb", "a100-sxm4-40gb"]
    batches, dtypes, fusions = (1, 8), ("bf16", "fp8_e4m3", "int8"), (False, True)
    problem = ModelProblem("gpt2", hardware, batch=batches, dtypes=dtypes, fusion=fusions, seq=128)
    limit = 1.5e-3
    cons = [parse_constraint(f"ttft_s<={limit}", problem.metrics)]
    res = tune(problem, cons, "latency_s", "min", search="exhaustive", top=50)
    assert res.method == "exhaustive" and len(res.visited) == 24
    brute = _brute_force("gpt2", hardware, batches, dtypes, fusions, 128, lambda r: r.totals.latency_s <= limit)
    assert brute, "the case must have feasible configurations"
    assert len(brute) < 24, "and rejected ones"
    assert [t.config for t in res.feasible] == [c for _, c in brute]
    assert [t.metrics["latency_s"] for t in res.feasible] == pytest.approx([lat for lat, _ in brute], rel=1e-12)
    # fp8 has no tensor rate on the A100: rejected as unsupported, with the engine's reason
    fp8_a100 = [t for t in res.rejected if t.config["hardware"] == "a100-sxm4-40gb" and t.config["dtype"] == "fp8_e4m3"]
    assert len(fp8_a100) == 4 and all(t.status == "error" and "no rate for dtype 'fp8_e4m3'" in t.reason
                                      for t in fp8_a100)


def test_throughput_objective_maximises() -> None:
    problem = ModelProblem("gpt2", ["h100-sxm5-80gb"], batch=(1, 4, 16), dtypes=("bf16",), fusion=(True,), seq=128)
    res = tune(problem, [], "throughput_per_s", "max", search="exhaustive")
    thr = [t.metrics["throughput_per_s"] for t in res.feasible]
    assert thr == sorted(thr, reverse=True)
    best = res.best[0]
    assert best.metrics["throughput_per_s"] == pytest.approx(best.config["batch"] / best.metrics["latency_s"])
    assert best.metrics["energy_per_sample_j"] == pytest.approx(best.metrics["energy_j"] / best.config["batch"])
    assert best.metrics["power_w"] == pytest.approx(best.metrics["energy_j"] / best.metrics["latency_s"])


def test_pruning_rejects_exactly_the_configurations_that_do_not_fit() -> None:
    # hand check: Llama 2 70B has 68.98e9 parameters (zoo entry); in fp16 that is 137.96e9 bytes of
    # weights alone, more than one 80 GB H100 holds, but less than a 141 GB H200; in fp8 68.98e9 bytes fit both
    hardware = ["h100-sxm5-80gb", "h200-sxm-141gb"]
    problem = ModelProblem("llama-2-70b", hardware, batch=(1,), dtypes=("fp16", "fp8_e4m3"), fusion=(False,), seq=128)
    res = tune(problem, [], "latency_s", "min", search="exhaustive")
    pruned = {(t.config["hardware"], t.config["dtype"]) for t in res.visited if t.status == "pruned"}
    fits = {}
    for hw_name, dt in itertools.product(hardware, ("fp16", "fp8_e4m3")):
        rep = evaluate(load_workload("llama-2-70b", batch=1, seq=128, dtype=dt), load_hardware(hw_name))
        fits[(hw_name, dt)] = rep.memory.fits
        if dt == "fp16":
            assert rep.memory.weights_bytes > 80e9 > 0.5 * rep.memory.weights_bytes
    assert pruned == {k for k, ok in fits.items() if not ok} == {("h100-sxm5-80gb", "fp16")}
    assert res.evaluations == 3  # the pruned configuration was never costed
    (t,) = [t for t in res.visited if t.status == "pruned"]
    need, have = t.metrics["memory_per_device"], t.metrics["capacity"]
    assert have == 79.18 * GiB and need > 128 * GiB  # the runtime's total, not the marketed 80 GB
    assert t.reason == f"does not fit: needs {need / GiB:.1f} GiB, has 79.2 GiB ({(need - have) / GiB:.1f} GiB over)"


def test_memory_constraint_prunes_before_evaluation() -> None:
    problem = ModelProblem("llama-2-7b", ["h100-sxm5-80gb"], batch=(1,), dtypes=("fp32", "bf16"), fusion=(False,),
                           seq=128)
    cons = [parse_constraint("memory_per_device<=0.3*capacity", problem.metrics)]
    res = tune(problem, cons, "latency_s", "min", search="exhaustive")
    # 6.74e9 parameters: fp32 27 GB > 25.5 GB = 0.3 x 79.18 GiB (the runtime's total); bf16 13.5 GB fits
    assert res.evaluations == 1 and res.pruned == 1
    assert [t.config["dtype"] for t in res.best] == ["bf16"]
    (t,) = res.rejected
    assert t.reason.startswith("breaks memory_per_device<=0.3*capacity (0.3 x capacity = 23.75 GiB): needs 2")


def test_parallel_plans_on_a_system_against_evaluate_plan() -> None:
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    problem = ModelProblem("gpt2", ["dgx-h100"], batch=(4,), dtypes=("bf16",), fusion=(False,), seq=128,
                           tp=(1, 2, 3), pp=(1,), dp=(1, 2))
    res = tune(problem, [], "latency_s", "min", search="exhaustive")
    # tp 3 does not divide 8 devices: those configurations do not exist (not rejected, not counted)
    assert res.valid_size == 4 and len(res.visited) == 4
    hw = load_hardware("dgx-h100")
    expect = {}
    for tp, dp in itertools.product((1, 2), (1, 2)):
        r = evaluate_plan("gpt2", hw, ParallelPlan(tp=tp, dp=dp), EvalOptions(fusion=False), seq=128, batch=4,
                          dtype="bf16")
        expect[(tp, dp)] = r.latency_s
    for t in res.visited:
        key = (t.config["tp"], t.config["dp"])
        if key == (1, 1):  # one device: the plain engine, as `nodeperf predict` without a plan
            rep = evaluate(load_workload("gpt2", batch=4, seq=128, dtype="bf16"), hw, EvalOptions(fusion=False))
            assert t.metrics["latency_s"] == pytest.approx(rep.totals.latency_s, rel=1e-12)
        else:
            assert t.metrics["latency_s"] == pytest.approx(expect[key], rel=1e-12)
        assert t.metrics["devices"] == key[0] * key[1]
        assert t.metrics["throughput_per_s"] == pytest.approx(4 * key[1] / t.metrics["latency_s"])


def test_generate_phase_has_ttft_and_tpot_of_generate_request() -> None:
    from simulator.parallel.compose import generate_request
    from workloads.parallel import ParallelPlan

    problem = ModelProblem("gpt2", ["h100-sxm5-80gb"], batch=(2,), dtypes=("bf16",), fusion=(True,),
                           phase="generate", input_len=64, output_len=8)
    assert {"ttft_s", "tpot_s", "tokens_per_s"} <= problem.metrics
    res = tune(problem, [parse_constraint("tpot_s<=1", problem.metrics)], "latency_s", "min")
    (t,) = res.best
    ref = generate_request("gpt2", load_hardware("h100-sxm5-80gb"), ParallelPlan(), EvalOptions(fusion=True),
                           input_len=64, output_len=8, batch=2, dtype="bf16")
    assert t.metrics["ttft_s"] == pytest.approx(ref.extra["ttft_s"], rel=1e-12)
    assert t.metrics["tpot_s"] == pytest.approx(ref.extra["tpot_s"], rel=1e-12)
    assert t.metrics["latency_s"] == pytest.approx(ref.extra["e2e_latency_s"], rel=1e-12)


def test_cost_metrics_from_the_price_file() -> None:
    prices = load_prices()
    h100 = prices["h100-sxm5-80gb"]
    assert h100.usd_per_hour == 2.99 and "1x_H100-SXM_SECURE" in h100.source and h100.date  # RunPod, prices.toml
    problem = ModelProblem("gpt2", ["h100-sxm5-80gb"], batch=(4,), dtypes=("bf16",), fusion=(True,), seq=128,
                           prices=prices)
    res = tune(problem, [], "cost_per_million_samples", "min")
    m = res.best[0].metrics
    assert m["cost_per_hour"] == pytest.approx(2.99)
    assert m["cost_per_million_samples"] == pytest.approx(2.99 / 3600 * 1e6 / m["throughput_per_s"])
    unpriced = ModelProblem("gpt2", ["mi250x"], batch=(1,), dtypes=("bf16",), prices=prices)
    assert "cost_per_hour" not in unpriced.metrics
    with pytest.raises(TuneError, match="no hourly price for 'mi250x'"):
        unpriced.require_cost("--objective cost")


def test_bad_price_file_is_located(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "p.toml"
    f.write_text('schema = 1\n[devices.h100-sxm5-80gb]\nusd_per_hour = { value = -3, source = "x" }\n')
    with pytest.raises(ValueError, match=r"devices\.h100-sxm5-80gb\.usd_per_hour\.value: not a positive price"):
        load_prices(f)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"hardware": ["h100x"]}, "--hardware 'h100x'"),
    ({"hardware": ["l4", "l4"]}, "listed twice"),
    ({"hardware": []}, "empty device list"),
    ({"dtypes": ("bf17",)}, "--dtype 'bf17'"),
    ({"batch": ()}, "--batch: empty list"),
    ({"recompute": ("full",)}, "--recompute"),
    ({"tp": (2,)}, "need a multi-device system"),
    ({"phase": "generate"}, "--input-len and --output-len"),
])
def test_bad_problem_input(kwargs: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {"hardware": ["h100-sxm5-80gb"]}
    args.update(kwargs)
    hardware = args.pop("hardware")
    with pytest.raises(ValueError) as err:
        ModelProblem("gpt2", hardware, **args)  # type: ignore[arg-type]
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_search_method_and_empty_space() -> None:
    problem = ModelProblem("gpt2", ["h100-sxm5-80gb"], batch=(1,), dtypes=("bf16",), seq=64)
    with pytest.raises(TuneError, match="did you mean 'bayes'"):
        tune(problem, [], "latency_s", "min", search="bayse")
    system = ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), seq=64, tp=(3,), pp=(1,), dp=(1,))
    with pytest.raises(TuneError, match="search space: empty"):
        tune(system, [], "latency_s", "min")


def test_json_contract() -> None:
    problem = ModelProblem("gpt2", ["h100-sxm5-80gb"], batch=(1, 64), dtypes=("bf16", "int4"), fusion=(True,),
                           seq=128)
    res = tune(problem, [parse_constraint("latency_s<=0.01", problem.metrics)], "latency_s", "min")
    doc = res.to_json(rejected=10)
    assert {"best", "rejected", "objective", "metric", "direction", "search", "seed", "space", "constraints",
            "evaluated", "pruned", "feasible", "rejected_total"} <= set(doc)
    assert doc["best"] and all(set(b) == {"config", "metrics"} for b in doc["best"])
    assert doc["rejected"] and all({"config", "reason"} <= set(r) for r in doc["rejected"])
    assert set(doc["best"][0]["config"]) == {"hardware", "batch", "dtype", "fusion"}
    assert doc["rejected_total"] == len(doc["rejected"]) == 2
    assert {r["config"]["dtype"] for r in doc["rejected"]} == {"int4"}  # no int4 tensor rate on an H100
    assert all(r["stage"] == "not supported" for r in doc["rejected"])
    assert res.to_json(rejected=1)["rejected_total"] == 2 and len(res.to_json(rejected=1)["rejected"]) == 1


# ------------------------------------------------------------------------------------------ generic core


class _Toy:
    """A problem in closed form: f(x, y) = (x - 3)^2 + (y - 5)^2 + 1 over x, y in 0..9; x + y > 14 does
    not 'fit'; x == 7 is 'unsupported'. Counts evaluations."""

    lower_bound_metrics = frozenset()
    metrics = frozenset({"latency_s", "power_w"})

    def __init__(self, many: bool = False) -> None:
        self.space = SearchSpace((Axis("x", tuple(range(10)), numeric=True), Axis("y", tuple(range(10)), numeric=True)))
        self.calls = 0
        if many:
            self.evaluate_many = lambda cs: [self.evaluate(c) for c in cs]

    def valid(self, config: dict[str, int]) -> bool:
        return True

    def precheck(self, config: dict[str, int]) -> tuple[dict[str, float], str]:
        return {}, ("too big" if config["x"] + config["y"] > 14 else "")

    def evaluate(self, config: dict[str, int]) -> dict[str, float]:
        self.calls += 1
        if config["x"] == 7:
            raise ValueError("x 7 is not supported")
        v = float((config["x"] - 3) ** 2 + (config["y"] - 5) ** 2 + 1)
        return {"latency_s": v, "power_w": 100.0 * config["x"]}


@pytest.mark.parametrize("many", [False, True])
def test_generic_exhaustive_search_prunes_and_ranks(many: bool) -> None:
    toy = _Toy(many)
    res = tune(toy, [parse_constraint("power_w<=500", toy.metrics)], "latency_s", "min", search="exhaustive")
    grid = [(x, y) for x in range(10) for y in range(10)]
    fits = [(x, y) for x, y in grid if x + y <= 14]
    assert res.evaluations == len(fits)  # pruned configurations are never evaluated
    # a batch with an unsupported configuration is re-run one by one to locate it
    assert toy.calls == len(fits) if not many else toy.calls > len(fits)
    assert res.pruned == len(grid) - len(fits)
    ok = sorted(((x - 3) ** 2 + (y - 5) ** 2 + 1, 10 * x + y) for x, y in fits if x != 7 and 100 * x <= 500)
    assert [t.index for t in res.feasible] == [i for _, i in ok]
    assert res.best[0].config == {"x": 3, "y": 5}
    errors = [t for t in res.visited if t.status == "error"]
    assert {t.config["x"] for t in errors} == {7} and errors[0].reason == "not supported: x 7 is not supported"
    near = res.nearest_rejected(2)
    # nearest: one axis changed by the fewest steps from (3, 5)
    assert [t.config for t in near] == [{"x": 6, "y": 5}, {"x": 7, "y": 5}]
    assert near[0].reason == "breaks power_w<=500: 600 W, limit 500 W (100 W over)"


def test_generic_bayes_budget_and_determinism() -> None:
    toy = _Toy()
    a = tune(toy, [], "latency_s", "min", search="bayes", trials=12, seed=3)
    assert a.evaluations == 12
    b = tune(_Toy(), [], "latency_s", "min", search="bayes", trials=12, seed=3)
    assert a.to_json() == b.to_json()
    rnd = tune(_Toy(), [], "latency_s", "min", search="random", trials=12, seed=3)
    assert a.best[0].metrics["latency_s"] <= rnd.best[0].metrics["latency_s"]


class _Huge:
    """3.4 million configurations (too many to list): f = sum of squared distances to (40, 90, 10)."""

    lower_bound_metrics = frozenset()
    metrics = frozenset({"latency_s"})

    def __init__(self) -> None:
        self.space = SearchSpace(tuple(Axis(n, tuple(range(1, 151)), numeric=True) for n in "abc"))

    def valid(self, config: dict[str, int]) -> bool:
        return True

    def precheck(self, config: dict[str, int]) -> tuple[dict[str, float], str]:
        return {}, ""

    def evaluate(self, config: dict[str, int]) -> dict[str, float]:
        return {"latency_s": 1.0 + (config["a"] - 40) ** 2 + (config["b"] - 90) ** 2 + (config["c"] - 10) ** 2}


def test_search_of_a_space_too_large_to_list() -> None:
    a = tune(_Huge(), [], "latency_s", "min", search="bayes", trials=24, seed=1)
    b = tune(_Huge(), [], "latency_s", "min", search="bayes", trials=24, seed=1)
    r = tune(_Huge(), [], "latency_s", "min", search="random", trials=24, seed=1)
    assert a.valid_size is None and a.method == "bayes" and a.evaluations == r.evaluations == 24
    assert [t.index for t in a.visited] == [t.index for t in b.visited]
    assert a.best[0].metrics["latency_s"] <= r.best[0].metrics["latency_s"]

"""tune searches serving precision on parallel plans as on one device: each plan's steps are priced with the
configuration's weight and KV-cache dtypes, as ``predict --weight-dtype/--kv-dtype --tp N`` prices them; a training
search refuses them."""

from __future__ import annotations

import pytest

from simulator.sweep.tune_model import ModelProblem, TuneError


def _problem(weight_dtypes):
    return ModelProblem("llama-2-7b", ["dgx-h100"], batch=[8], dtypes=("bf16",), fusion=(True,), phase="decode",
                        context=1024, tp=[2], weight_dtypes=weight_dtypes, kv_dtype="fp8")


def _valid(p):
    # the plan on two of the node's devices (one tensor-parallel pair, no data parallelism)
    return [c for c in (p.space.config(i) for i in range(p.space.size)) if p.valid(c) and c["dp"] == c["pp"] == 1]


def test_precision_with_plans_prices_the_plan_as_predict():
    from simulator.parallel.compose import evaluate_plan

    p16, p4 = _problem(("none",)), _problem(("int4",))
    (c16,), (c4,) = _valid(p16), _valid(p4)
    assert c4["weight_dtype"] == "int4" and c4["tp"] == 2
    # int4 with group-128 fp16 scales: 4.125 of 16 bits per quantised weight; the embeddings and LM head stay bf16
    assert p4.precheck(c4)[0]["memory_per_device"] < 0.45 * p16.precheck(c16)[0]["memory_per_device"]
    want = evaluate_plan("llama-2-7b", p4.hw["dgx-h100"], p4._plan(c4), p4._options(c4), phase="decode", context=1024,
                         dtype="bf16", batch=8, weight_dtype="int4", kv_dtype="fp8")
    assert p4.evaluate(c4)["latency_s"] == pytest.approx(float(want.latency_s), rel=1e-9)
    assert p4.evaluate(c4)["latency_s"] < p16.evaluate(c16)["latency_s"]


def test_precision_in_training_is_refused():
    with pytest.raises(TuneError, match=r"--weight-dtype/--kv-dtype: tune searches serving precision on inference "
                                        r"steps only; got --train"):
        ModelProblem("llama-2-7b", ["dgx-h100"], batch=[8], train=True, tp=[2], kv_dtype="fp8")

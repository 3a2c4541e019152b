"""`predict --weight-dtype/--kv-dtype` with a parallel plan: every inference step of the plan is built at that
serving precision (as evaluate_plan / generate_request take it), not refused."""

from __future__ import annotations

import json

import pytest

from hwmodels.catalog import load_system
from simulator.cli.main import main
from simulator.engines.analytical import EvalOptions
from simulator.parallel.compose import evaluate_plan, generate_request
from workloads.parallel import ParallelPlan

BASE = ["llama-2-7b", "--hardware", "dgx-h100", "--tp", "2", "--batch", "8"]


def _json(capsys, *argv):
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_decode_step_at_fp8(capsys):
    got = _json(capsys, *BASE, "--phase", "decode", "--context", "1024", "--weight-dtype", "fp8", "--kv-dtype", "fp8")
    want = evaluate_plan("llama-2-7b", load_system("dgx-h100"), ParallelPlan(tp=2), EvalOptions(), phase="decode",
                         context=1024, batch=8, weight_dtype="fp8", kv_dtype="fp8")
    assert got["latency_s"] == pytest.approx(want.latency_s, rel=1e-12)
    sixteen = _json(capsys, *BASE, "--phase", "decode", "--context", "1024")
    assert got["latency_s"] < sixteen["latency_s"]
    # by hand: the fp8 KV cache of one device, K and V of 32 layers, 16 of 32 heads x 128, 8 x 1024 positions, 1 byte
    assert want.stages[0].kv_cache_bytes == pytest.approx(2 * 32 * 2048 * 8 * 1024, rel=1e-12)


def test_generate_request_at_int8_weights(capsys):
    got = _json(capsys, *BASE, "--phase", "generate", "--input-len", "128", "--output-len", "4",
                "--weight-dtype", "int8")
    want = generate_request("llama-2-7b", load_system("dgx-h100"), ParallelPlan(tp=2), EvalOptions(), input_len=128,
                            output_len=4, batch=8, weight_dtype="int8")
    assert got["latency_s"] == pytest.approx(want.latency_s, rel=1e-12)
    assert got["latency_s"] != pytest.approx(_json(capsys, *BASE, "--phase", "generate", "--input-len", "128",
                                                   "--output-len", "4")["latency_s"], rel=1e-6)

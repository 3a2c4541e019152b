"""--moe-dispatch, --grad-reduce-dtype and --fp8-params reach the plan, and their costs follow by hand."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main

BASE = ("predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--tp", "2", "--dp", "4", "--zero", "1",
        "--microbatch", "1", "--seq", "4096", "--json")


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_bf16_gradients_halve_the_gradient_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    fp32 = _run(capsys, "--grad-reduce-dtype", "fp32")
    bf16 = _run(capsys, "--grad-reduce-dtype", "bf16")
    assert fp32["plan"]["grad_reduce_dtype"] == "fp32" and bf16["plan"]["grad_reduce_dtype"] == "bf16"
    g32 = fp32["stages"][0]["gradients_bytes"]
    g16 = bf16["stages"][0]["gradients_bytes"]
    # ZeRO-1 keeps the whole gradient of the stage's tp shard: 4 bytes per parameter in fp32, 2 in bf16
    assert g16 == pytest.approx(g32 / 2, rel=1e-9)
    # bf16 gradients are the bf16 weights' size: 2 bytes for each of the stage's parameters
    assert g16 == bf16["stages"][0]["weights_bytes"] > 0


def test_fp8_params_drop_the_fp8_weight_cache(capsys: pytest.CaptureFixture[str]) -> None:
    cached = _run(capsys, "--fp8-linears", "current")
    params = _run(capsys, "--fp8-linears", "current", "--fp8-params")
    assert params["plan"]["fp8_param"] is True and "fp8_param" not in cached["plan"]
    assert params["memory_per_device_bytes"] < cached["memory_per_device_bytes"]


TPU = ("predict", "llama-3-8b", "--hardware", "tpu-v5p-8", "--train", "--dp", "4", "--fsdp", "--microbatch", "1",
       "--seq", "2048", "--framework", "maxtext", "--recompute", "full", "--json")


def test_param_dtype_and_loss_chunks_reach_the_xla_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(list(TPU)) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*TPU, "--param-dtype", "bf16", "--loss-chunks", "8"]) == 0
    new = json.loads(capsys.readouterr().out)
    assert new["plan"]["param_dtype"] == "bf16" and new["plan"]["loss_chunks"] == 8
    assert "param_dtype" not in base["plan"] and "loss_chunks" not in base["plan"]
    b, n = base["stages"][0], new["stages"][0]
    # MaxText weight_dtype bfloat16: parameters, gradients and AdamW moments at half their fp32 bytes
    assert n["weights_bytes"] == pytest.approx(b["weights_bytes"] / 2)
    assert n["optimizer_state_bytes"] == pytest.approx(b["optimizer_state_bytes"] / 2)
    assert n["activations_bytes"] != b["activations_bytes"]

"""A training prediction's JSON decomposes device memory the same way at both levels: ``memory`` (the worst
stage) and ``stages[]`` each state runtime buffers and the caching allocator's reserve apart, and the parts sum
to their total (``memory.required_bytes``, ``stages[].memory_bytes``)."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main

FSDP = ("predict", "llama-3-8b", "--train", "--hardware", "dgx-h100", "--tp", "2", "--pp", "2", "--dp", "2", "--fsdp",
        "--microbatch", "1", "--global-batch", "16", "--seq", "2048", "--json")
PARTS = ("weights_bytes", "activations_bytes", "kv_cache_bytes", "gradients_bytes", "optimizer_state_bytes",
         "runtime_buffers_bytes", "allocator_reserve_bytes")


def _doc(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_parts_sum_at_both_levels(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(capsys, FSDP)
    mem = doc["memory"]
    assert sum(mem[k] for k in PARTS) == mem["required_bytes"] == doc["memory_required_bytes"]
    # the kept key: memory.buffers_bytes is runtime buffers plus the allocator's reserve
    assert mem["buffers_bytes"] == mem["runtime_buffers_bytes"] + mem["allocator_reserve_bytes"]
    for st in doc["stages"]:
        assert sum(st[k] for k in PARTS) == pytest.approx(st["memory_bytes"], rel=1e-12)
        # the kept keys: a stage's buffers_bytes is without the reserve, its reserve_bytes the reserve
        assert st["runtime_buffers_bytes"] == st["buffers_bytes"]
        assert st["allocator_reserve_bytes"] == st["reserve_bytes"]
    worst = max(doc["stages"], key=lambda s: s["memory_bytes"])
    assert worst["memory_bytes"] == mem["required_bytes"]
    # the same figures as the worst stage's breakdown: FSDP2 on GPUs keeps a reserve (rounding, side-stream pools)
    bd = doc["memory_breakdown"]
    assert mem["allocator_reserve_bytes"] == int(bd["reserve"]) > 0
    assert mem["runtime_buffers_bytes"] == int(bd["buffers"]) > 0
    assert "allocator reserve" in mem["message"]


def test_a_tpu_step_has_no_allocator_reserve(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(capsys, ("predict", "llama-3-8b", "--hardware", "tpu-v5p-8", "--train", "--dp", "4", "--fsdp",
                        "--microbatch", "1", "--seq", "2048", "--framework", "maxtext", "--recompute", "full", "--json"))
    mem = doc["memory"]
    assert mem["allocator_reserve_bytes"] == 0 and mem["runtime_buffers_bytes"] == mem["buffers_bytes"] > 0
    assert sum(mem[k] for k in PARTS) == mem["required_bytes"]

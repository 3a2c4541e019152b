"""--moe-host-sync reaches the plan and prices each MoE layer's host synchronisation (hand-computed)."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main

BASE = ("predict", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--train", "--ep", "8", "--dp", "8",
        "--microbatch", "1", "--global-batch", "8", "--seq", "4096", "--framework", "megatron-core", "--json")


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_moe_host_sync_adds_a_round_trip_per_moe_layer(capsys: pytest.CaptureFixture[str]) -> None:
    free = _run(capsys)
    synced = _run(capsys, "--moe-host-sync")
    assert synced["plan"]["moe_host_sync"] is True and "moe_host_sync" not in free["plan"]
    # one microbatch, 48 MoE layers, each forward interval GPU-bound at 4,096 tokens (about 1 ms of GPU time
    # against 15 kernels x 20 us of host issue): 48 x efficiency.host_sync_s (5.8 us) more per step
    assert synced["latency_s"] - free["latency_s"] == pytest.approx(48 * 5.8e-6, rel=1e-6)

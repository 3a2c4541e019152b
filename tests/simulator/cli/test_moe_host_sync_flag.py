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
    # one microbatch, 48 MoE layers, each sync interval GPU-bound at 4,096 tokens (about 2 ms of GPU time
    # against 0.7 ms of host issue). Per sync: the round trip (efficiency.host_sync_s, 5.8 us) and the first
    # op's issue after the wait (efficiency.framework_op_overhead_s, 20 us: the GPU idles until the host
    # issues it; every later kernel is issued before the one ahead of it ends). Besides, the interval that
    # opens the microbatch starts on an idle GPU with the embedding's and first norm's short kernels (12-14 us
    # of GPU each against 20 us of issue): under three more issues. And the dropless dispatcher's all-gather of
    # the per-expert counts (one collective a MoE layer, only with the wait), priced as its own record.
    gathers = [op["time_s"] for op in synced["ops"] if op["name"].endswith(".moe.count_all_gather")]
    assert len(gathers) == 48 and not any(op["name"].endswith("count_all_gather") for op in free["ops"])
    diff = synced["latency_s"] - free["latency_s"] - sum(gathers)
    per_sync = 5.8e-6 + 20e-6
    assert 48 * per_sync + 20e-6 < diff < 48 * per_sync + 3 * 20e-6

"""--moe-dispatch hybridep: the sparse dispatch without the alltoall dispatcher's chunk sort (megatron-core)."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main

BASE = ("predict", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--train", "--dp", "8", "--ep", "8",
        "--microbatch", "1", "--seq", "4096", "--framework", "megatron-core", "--json")


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_hybridep_skips_the_chunk_sort(capsys: pytest.CaptureFixture[str]) -> None:
    sparse = _run(capsys)
    hybrid = _run(capsys, "--moe-dispatch", "hybridep")
    assert hybrid["plan"]["moe_dispatch"] == "hybridep" and "moe_dispatch" not in sparse["plan"]
    # the same step less the sort and unsort copies of the received rows (and their backward) in 48 layers
    assert hybrid["latency_s"] < sparse["latency_s"]
    assert hybrid["latency_s"] > 0.9 * sparse["latency_s"]


def test_an_unknown_dispatch_is_one_located_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--moe-dispatch", "hybrid-ep"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--moe-dispatch: got 'hybrid-ep'" in err and "did you mean 'hybridep'" in err

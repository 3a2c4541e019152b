"""`nodeperf validate --dataset collectives`: nccl-tests / rccl-tests bus bandwidths per system and size band."""

from __future__ import annotations

import json
import re

from hwmodels.collectives import compare_published, mape
from simulator.cli import main


def test_prints_every_band_and_system(capsys):
    assert main(["validate", "--dataset", "collectives"]) == 0
    out = capsys.readouterr().out
    for label in ("latency (<1 MiB)", "mid (1-256 MiB)", "bandwidth (>=256 MiB)", "dgx-h100 mid (1-256 MiB)",
                  "mi300x-8 bandwidth (>=256 MiB)", "aws-p5 latency (<1 MiB)", "dgx-h100 all_reduce 8x1 mid (1-256 MiB)",
                  "azure-nd-mi300x-v5 latency (<1 MiB)", "gb200-nvl72 all_reduce 72x1 bandwidth (>=256 MiB)"):
        assert label in out, label
    comps = [c for c in compare_published() if c.in_score]
    mid = [c for c in comps if 2**20 <= c.size_bytes < 2**28]
    assert re.search(rf"^mid \(1-256 MiB\) +{len(mid)} +{mape(mid):.1f} ", out, re.M)


def test_json_carries_the_system_band_table(capsys):
    assert main(["validate", "--dataset", "collectives", "--json"]) == 0
    summ = json.loads(capsys.readouterr().out)
    comps = [c for c in compare_published() if c.in_score and c.system == "dgx-h100" and c.size_bytes >= 2**28]
    got = summ["by_system_band"]["dgx-h100 bandwidth (>=256 MiB)"]
    assert got["n"] == len(comps) and abs(got["mape"] - mape(comps)) < 1e-9
    assert sum(g["n"] for g in summ["by_system_band"].values()) == summ["n"]


def test_refuses_options_it_does_not_use(capsys):
    assert main(["validate", "--dataset", "collectives", "--hardware", "h100"]) == 2
    assert "expected none" in capsys.readouterr().err

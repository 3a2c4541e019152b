"""`nodeperf systolic`: report contents, JSON shape, CSV columns and exit code 2 on bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from cli_capture import run_cli

REPO = Path(__file__).resolve().parents[3]
GEMM_TOPO = REPO / "tests/hwmodels/data/parity_gemm.csv"
HEADER = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"


def test_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, ["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os",
                         "--topology", str(GEMM_TOPO), "--json"])
    assert rc == 0
    doc = json.loads(out)
    names = [layer["name"] for layer in doc["layers"]]
    assert names == ["g1", "g2", "g3", "g4"]
    g1 = doc["layers"][0]
    # g1: M=100, N=37, K=64 on 8x8 os: 13 x 5 folds of 64 + 14 = 78 cycles
    assert g1["compute_cycles"] == 13 * 5 * 78 - 1 == g1["total_cycles"]
    assert g1["stall_cycles"] == 0
    assert g1["sram_ifmap_reads"] == 100 * 64 * 5
    assert g1["sram_filter_reads"] == 37 * 64 * 13
    assert g1["sram_ofmap_writes"] == 100 * 37 + 65 * 16
    for key in ("overall_util_pct", "mapping_eff_pct", "compute_util_pct"):
        assert 0 < g1[key] <= 100
    assert doc["total_cycles"] == sum(layer["total_cycles"] for layer in doc["layers"])


def test_json_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("systolic", "--rows", "16", "--cols", "8", "--dataflow", "ws", "--topology",
            str(GEMM_TOPO), "--sram-kib", "4,4,2", "--dram-words-per-cycle", "3", "--json")
    first = run_cli(capsys, list(argv))[1]
    assert first == run_cli(capsys, list(argv))[1]
    doc = json.loads(first)
    assert doc["sram_words"] == [4096, 4096, 2048]
    assert any(layer["bound"] == "memory" for layer in doc["layers"])
    for layer in doc["layers"]:
        assert layer["total_cycles"] == (layer["compute_cycles"] + layer["stall_cycles"]
                                         + layer["prefetch_cycles"] + layer["drain_cycles"])


def test_csv_report_has_scalesim_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.csv"
    rc, stdout, _ = run_cli(capsys, ["systolic", "--rows", "32", "--cols", "32", "--dataflow", "is",
                            "--topology", str(GEMM_TOPO), "--out", str(out)])
    assert rc == 0 and "TOTAL" in stdout
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][:7] == ["LayerID", "Total Cycles (incl. prefetch)", "Total Cycles", "Stall Cycles",
                           "Overall Util %", "Mapping Efficiency %", "Compute Util %"]
    assert {"DRAM IFMAP Reads", "SRAM OFMAP Writes", "Bound"} <= set(rows[0])
    assert [r[0] for r in rows[1:]] == ["0", "1", "2", "3"]
    # g3: M=8, N=8, K=300 on 32x32 is: 10 row folds x 1 of 2*32 + 32 + 8 - 2 = 102 cycles
    assert rows[3][2] == str(10 * 102 - 1)


@pytest.mark.parametrize(
    "content, argv_extra, expected",
    [
        (HEADER + "c, 18, 18, 3, 3, 0, 20, 1,\n", (), "bad.csv:2:18: channels of layer 'c' must be positive; got 0"),
        (HEADER + "c, 18, 18, 3, 3, 2.5, 20, 1,\n", (), "bad.csv:2:18: channels of layer 'c' is not an integer"),
        (HEADER + "c, 18, 18\n", (), "bad.csv:2:8: malformed row of layer 'c': 2 numeric fields"),
        (HEADER + "c, 18, 18, 3, 3,\n", (), "bad.csv:2:15: malformed row of layer 'c'"),
        (HEADER + "c, 2, 18, 3, 3, 1, 1, 1,\n", (), "bad.csv:2:11: filter height of layer 'c' exceeds"),
        (HEADER + "c, 18, 18, 3, 3, 1, 1, 1,\n", ("--sram-kib", "1,2"), "--sram-kib: expected three sizes"),
        (HEADER + "c, 18, 18, 3, 3, 1, 1, 1,\n", ("--dram-words-per-cycle", "0"), "--dram-words-per-cycle: must be"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, argv_extra: tuple, expected: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    rc, out, err = run_cli(capsys, ["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os",
                           "--topology", str(bad), *argv_extra])
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("nodeperf: error: ")
    assert expected.replace("bad.csv", str(bad)) in lines[0]


@pytest.mark.parametrize("flag, value", [("--rows", "0"), ("--cols", "-8"), ("--rows", "4.5")])
def test_bad_geometry_exits_2(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    argv = {"--rows": "8", "--cols": "8"} | {flag: value}
    rc, _, err = run_cli(capsys, ["systolic", "--rows", argv["--rows"], "--cols", argv["--cols"],
                         "--dataflow", "os", "--topology", str(GEMM_TOPO)])
    assert rc == 2 and err.startswith(f"nodeperf: error: {flag}:")


def test_missing_topology_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run_cli(capsys, ["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os",
                         "--topology", str(tmp_path / "nope.csv")])
    assert rc == 2 and "nope.csv" in err and len(err.strip().splitlines()) == 1

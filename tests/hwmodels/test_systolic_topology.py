"""hwmodels.topology: SCALE-Sim topology CSV parsing, located errors, and the ResNet-50 table."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwmodels.topology import TopologyError, parse_topology, read_topology

REPO = Path(__file__).resolve().parents[2]
HEADER = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"


def test_conv_and_gemm_rows_with_and_without_trailing_comma() -> None:
    t = parse_topology(HEADER + "c1, 18, 18, 3, 3, 3, 20, 1,\nfc, 1, 1000, 2048\n")
    c1, fc = t.layers
    assert (c1.kind, c1.line, c1.m, c1.n, c1.k) == ("conv", 2, 256, 20, 27)
    assert (fc.kind, fc.line, fc.m, fc.n, fc.k) == ("gemm", 3, 1, 1000, 2048)
    assert fc.ifmap_words == 2048


def test_dense_sparsity_field_and_depthwise_expansion() -> None:
    t = parse_topology(HEADER + "dw_DP, 10, 10, 3, 3, 3, 1, 1, 1:1,\n")
    assert [layer.name for layer in t.layers] == [f"dw_DPChannel_{i}" for i in range(3)]
    assert all(layer.channels == 1 and layer.k == 9 for layer in t.layers)


@pytest.mark.parametrize(
    "row, expected",
    [
        ("c, 18, 18, 3, 3, 0, 20, 1,", "t.csv:2:18: channels of layer 'c' must be positive; got 0"),
        ("c, 18, 18, 3, -3, 3, 20, 1,", "t.csv:2:15: filter width of layer 'c' must be positive; got -3"),
        ("c, 18, 18.5, 3, 3, 3, 20, 1,", "t.csv:2:8: ifmap width of layer 'c' is not an integer; got '18.5'"),
        ("c, 18, 18, 3, 3, x, 20, 1,", "t.csv:2:18: channels of layer 'c' is not an integer; got 'x'"),
        ("c, 18, 18, 3, 3, 3,", "t.csv:2:18: malformed row of layer 'c': 5 numeric fields"),
        ("c, 4, 18, 5, 3, 3, 20, 1,", "t.csv:2:11: filter height of layer 'c' exceeds the input height; got 5 > 4"),
        ("c, 18, 18, 3, 3, 3, 20, 1, 2:4,", "t.csv:2:28: structured sparsity is not modelled; got '2:4'"),
        (", 18, 18, 3, 3, 3, 20, 1,", "t.csv:2:1: empty layer name"),
    ],
)
def test_errors_name_file_line_and_column(row: str, expected: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(HEADER + row + "\n", source="t.csv")
    assert str(info.value).startswith(expected), str(info.value)


def test_all_problems_collected_in_one_error() -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(HEADER + "a, 0, 1, 1\nb, 1, 1, 1\nc, 1, x, 1\n", source="t.csv")
    assert len(info.value.problems) == 2
    lines = str(info.value).split("\n")
    assert lines[0] == "t.csv: 2 problems in topology file" and len(lines) == 3
    assert info.value.problems[1].startswith("t.csv:4:7: N of layer 'c' is not an integer")


def test_empty_topology_is_an_error() -> None:
    with pytest.raises(TopologyError, match="no layers"):
        parse_topology(HEADER)


def test_missing_topology_file_is_one_located_error(tmp_path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match=r"nope\.csv: topology file not found; got '.*nope\.csv'; "
                                                r"expected a SCALE-Sim topology CSV"):
        read_topology(missing)


def test_resnet50_table() -> None:
    t = read_topology(REPO / "studies/topologies/resnet50.csv")
    convs = [layer for layer in t.layers if layer.name != "fc1000"]
    # 1 stem + 16 bottleneck blocks x 3 + 4 projection shortcuts = 53 convolutions, then the fc
    assert len(convs) == 53 and t.layers[-1].name == "fc1000"
    assert [layer.ofmap_h for layer in t.layers if layer.name.endswith("b")] == (
        [56] * 3 + [28] * 4 + [14] * 6 + [7] * 3
    )
    macs = sum(layer.m * layer.n * layer.k for layer in t.layers)
    # He et al. 2016, Table 1: 3.8 x 10^9 multiply-adds for the 50-layer network
    assert macs == 3_857_973_248
    assert round(macs / 1e9, 1) == 3.9 and abs(macs - 3.8e9) / 3.8e9 < 0.02

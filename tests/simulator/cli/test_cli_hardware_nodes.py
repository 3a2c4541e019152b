"""`nodeperf hardware` lists heterogeneous nodes and power modes, and shows a node or a device in a power mode."""

from __future__ import annotations

import json

from simulator.cli import main


def test_list_names_nodes_and_power_modes(capsys):
    assert main(["hardware", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"h100-plus-systolic128", "tpu-v5e-host", "jetson-agx-orin-64gb"} <= set(out["nodes"])
    assert out["power_modes"]["jetson-agx-orin-64gb"] == ["15w", "30w", "50w", "60w"]
    assert main(["hardware"]) == 0
    text = capsys.readouterr().out
    assert "heterogeneous node" in text and "jetson-agx-orin-64gb@15w" in text


def test_show_node_lists_devices_links_and_shared_memory(capsys):
    assert main(["hardware", "show", "jetson-agx-orin-64gb", "--json"]) == 0
    node = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in node["devices"]] == ["gpu", "dla0", "dla1", "cpu"]
    assert [d["device"] for d in node["devices"]][:3] == ["jetson-agx-orin-64gb", "orin-dla", "orin-dla"]
    assert set(node["shared_memory"]) >= {"gpu", "dla0", "dla1"}
    assert main(["hardware", "show", "h100-plus-systolic128"]) == 0
    text = capsys.readouterr().out
    assert "gpu - sa" in text and "pcie5" in text


def test_show_power_mode_applies_the_mode(capsys):
    assert main(["hardware", "show", "jetson-agx-orin-64gb@15w", "--json"]) == 0
    low = json.loads(capsys.readouterr().out)
    assert main(["hardware", "show", "jetson-agx-orin-64gb@60w", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    # nvpmodel MODE_15W: GPU max frequency 408 MHz (the catalog's cited figure)
    assert low["clock"]["boost_hz"] == 408e6 and full["clock"]["boost_hz"] > low["clock"]["boost_hz"]


def test_unknown_power_mode_is_one_line_exit_2(capsys):
    assert main(["hardware", "show", "jetson-agx-orin-64gb@99w"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown mode" in err[0] and "15w" in err[0]

"""`nodeperf tune --objective cost --price tco` (model searches): each candidate's device-hour priced as `serve`
prices a run (purchase amortised + the candidate's own predicted average power x PUE x electricity price),
hand-computed from the JSON; the cost object per entry; refusals one located line and exit 2."""

from __future__ import annotations

import json
import math

import pytest
from cli_capture import run_cli

PRICES = """schema = 1
[devices.h100-sxm5-80gb]
usd_per_hour = { value = 2.0, source = "a test price" }
purchase_usd = { value = 30000.0, source = "a test purchase price", basis = "server_share" }
"""
GPT2 = ["tune", "gpt2", "--hardware", "h100-sxm5-80gb", "--batch", "4", "--dtype", "bf16", "--fusion", "on",
        "--seq", "128", "--objective", "cost"]
TCO = ["--price", "tco", "--tco-years", "4", "--pue", "1.3", "--electricity-usd-per-kwh", "0.10"]


def _prices(tmp_path) -> str:  # type: ignore[no-untyped-def]
    p = tmp_path / "prices.toml"
    p.write_text(PRICES)
    return str(p)


def test_tco_of_one_candidate_hand_computed(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run_cli(capsys, [*GPT2, *TCO, "--tco-utilization", "0.5", "--prices", _prices(tmp_path), "--json"])
    (best,) = json.loads(out)["best"]
    m, c = best["metrics"], best["cost"]
    watts = m["energy_j"] / (m["latency_s"] * 1)  # one device: the candidate's own predicted average power
    assert rc == 0 and 0 < watts < 700.0 and math.isclose(c["power_w"], watts) and math.isclose(m["power_w"], watts)
    capex, energy = 30000.0 / (4 * 8760 * 0.5), watts / 1000 * 1.3 * 0.10
    assert math.isclose(c["parts"]["capex"], capex) and math.isclose(c["parts"]["energy"], energy)
    assert math.isclose(c["usd_per_device_hour"], capex + energy) and math.isclose(m["cost_per_hour"], capex + energy)
    per_million = (capex + energy) * m["latency_s"] / 3600 / 4 * 1e6  # a batch of 4 samples per latency_s
    assert math.isclose(m["cost_per_million_samples"], per_million) and math.isclose(c["usd_per_million_samples"],
                                                                                     per_million)
    assert math.isclose(m["cost_per_million_tokens"], per_million / 128)  # 128 tokens a sample
    assert c["mode"] == "tco" and c["source"] == "a test purchase price" and c["power_from"].startswith("configuration")
    assert c["inputs"] == {"years": 4.0, "pue": 1.3, "usd_per_kwh": 0.10, "utilization": 0.5, "prices": _prices(tmp_path)}
    rc, out, _ = run_cli(capsys, [*GPT2, "--prices", _prices(tmp_path), "--json"])  # cloud: the rent, no power
    (best,) = json.loads(out)["best"]
    assert rc == 0 and best["cost"]["mode"] == "cloud" and best["metrics"]["cost_per_hour"] == 2.0
    assert "power_w" not in best["cost"] and best["cost"]["parts"] == {"rent": 2.0}


def test_training_step_cost_hand_computed(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    argv = ["tune", "gpt2", "--hardware", "dgx-h100", "--train", "--seq", "128", "--batch", "1", "--dtype", "bf16",
            "--fusion", "on", "--recompute", "none", "--tp", "1", "--pp", "1", "--dp", "8", "--global-batch", "16",
            "--objective", "cost", *TCO, "--json"]
    rc, out, _ = run_cli(capsys, argv)
    (best,) = json.loads(out)["best"]
    m, c = best["metrics"], best["cost"]
    watts = m["energy_j"] / (m["latency_s"] * 8)
    hourly = 33750.0 / (4 * 8760) + watts / 1000 * 1.3 * 0.10  # the catalog's h100-sxm5-80gb purchase_usd
    step = hourly * 8 * m["latency_s"] / 3600
    assert rc == 0 and math.isclose(c["power_w"], watts) and math.isclose(c["usd_per_device_hour"], hourly)
    assert math.isclose(m["cost_per_step"], step) and math.isclose(c["usd_per_step"], step)
    assert math.isclose(m["cost_per_million_samples"], step / 16 * 1e6)
    assert math.isclose(m["cost_per_million_tokens"], step / (16 * 128) * 1e6)


@pytest.mark.parametrize("extra, needle", [
    (["--price", "tco", "--pue", "1.3"], "--price tco: --tco-years, --electricity-usd-per-kwh not given; got none"),
    (["--tco-years", "4"], "--tco-years: a TCO input; got --price cloud; expected --price tco with it"),
    (["--constraint", "cost_per_step<=1"], "--constraint 'cost_per_step<=1': cost_per_step prices a training step's"),
])
def test_bad_price_inputs_one_located_line(capsys, extra, needle) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = run_cli(capsys, [*GPT2, *extra])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


def test_tco_of_a_device_without_purchase_price_exit_2(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, _, err = run_cli(capsys, ["tune", "gpt2", "--hardware", "h100-sxm5-80gb,l40s", "--objective", "cost", *TCO,
                               "--prices", _prices(tmp_path)])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--price tco: no purchase_usd for device 'l40s'" in err and "h100-sxm5-80gb" in err, err


def test_a_systolic_search_refuses_the_price_options(capsys) -> None:  # type: ignore[no-untyped-def]
    rc, _, err = run_cli(capsys, ["tune", "gemm:m=64,n=64,k=64", "--systolic", "--dram-words-per-cycle", "16", *TCO])
    assert rc == 2 and "tune --systolic: --price is a model-search option" in err, err

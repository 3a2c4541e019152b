"""`nodeperf serve` / `tune --serve` price options (--price cloud|tco): hand-computed TCO per device-hour,
the JSON cost object saying how it was priced, bad inputs one located line and exit 2."""

from __future__ import annotations

import json
import math

import pytest
from cli_capture import run_cli

from hwmodels.cost import HOURS_PER_YEAR, Pricing, run_cost

PRICES = """schema = 1
[devices.h100-sxm5-80gb]
usd_per_hour = { value = 2.0, source = "a test price" }
purchase_usd = { value = 30000.0, source = "a test purchase price", basis = "server_share" }
"""
SERVE = ["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--requests", "8", "--lengths", "fixed:in=64,out=16"]
TCO = ["--price", "tco", "--tco-years", "4", "--pue", "1.3", "--electricity-usd-per-kwh", "0.10"]


def _prices(tmp_path) -> str:  # type: ignore[no-untyped-def]
    p = tmp_path / "prices.toml"
    p.write_text(PRICES)
    return str(p)


def test_tco_per_hour_hand_computed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 2 devices for an hour drawing 3.6 MJ: 500 W each; 30000 / (4 x 8760) + 0.5 kW x 1.3 x 0.10 USD/kWh
    pr = Pricing("tco", years=4.0, pue=1.3, usd_per_kwh=0.10, prices=_prices(tmp_path))
    c = run_cost("h100-sxm5-80gb", 2, 3600.0, 1_000_000, energy_j=3.6e6, pricing=pr)
    hourly = 30000.0 / (4 * 8760) + 0.5 * 1.3 * 0.10
    assert HOURS_PER_YEAR == 8760.0
    assert math.isclose(c["usd_per_device_hour"], hourly) and math.isclose(hourly, 0.921164383561644)
    assert math.isclose(c["usd_total"], 2 * hourly) and math.isclose(c["usd_per_million_tokens"], 2 * hourly)
    assert c["power_w"] == 500.0 and c["power_from"].startswith("run average")
    assert c["mode"] == "tco" and c["inputs"] == {"years": 4.0, "pue": 1.3, "usd_per_kwh": 0.10, "utilization": 1.0,
                                                   "prices": pr.prices}
    assert math.isclose(c["parts"]["capex"], 30000.0 / 35040) and math.isclose(c["parts"]["energy"], 0.065)
    assert c["source"] == "a test purchase price"


def test_tco_without_energy_charges_the_datasheet_power(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pr = Pricing("tco", years=5.0, pue=1.0, usd_per_kwh=0.2, utilization=0.5, prices=_prices(tmp_path))
    c = run_cost("h100-sxm5-80gb", 1, 7200.0, 0, pricing=pr)
    assert c["power_w"] == 700.0 and c["power_from"].startswith("datasheet")  # H100 SXM5 power.tdp_w
    hourly = 30000.0 / (5 * 8760 * 0.5) + 0.7 * 1.0 * 0.2
    assert math.isclose(c["usd_per_device_hour"], hourly) and math.isclose(c["usd_total"], 2 * hourly)
    assert c["usd_per_million_tokens"] is None


def test_cloud_cost_is_the_hourly_price(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = run_cost("h100-sxm5-80gb", 4, 1800.0, 500_000, pricing=Pricing(prices=_prices(tmp_path)))
    assert c["mode"] == "cloud" and c["usd_total"] == 4.0 and c["usd_per_million_tokens"] == 8.0
    assert "power_w" not in c and c["parts"] == {"rent": 2.0}
    none = run_cost("l40s", 1, 60.0, 10, pricing=Pricing(prices=_prices(tmp_path)))
    assert none["usd_per_million_tokens"] is None and "no price" in none["priced_by"]


def test_serve_json_says_how_it_was_priced(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run_cli(capsys, [*SERVE, *TCO, "--prices", _prices(tmp_path), "--json"])
    s = json.loads(out)
    c = s["cost"]
    assert rc == 0 and c["mode"] == "tco" and c["inputs"]["years"] == 4.0 and c["inputs"]["pue"] == 1.3
    watts = s["energy_j"] / (s["makespan_s"] * s["devices"])
    assert math.isclose(c["power_w"], watts) and 0 < watts < 700.0
    assert math.isclose(c["usd_per_device_hour"], 30000.0 / (4 * 8760) + watts / 1000 * 1.3 * 0.10)
    assert math.isclose(c["usd_per_million_tokens"],
                        c["usd_per_device_hour"] * s["makespan_s"] / 3600 / s["output_tokens"] * 1e6)
    rc, out, _ = run_cli(capsys, [*SERVE, "--prices", _prices(tmp_path), "--json"])
    assert rc == 0 and json.loads(out)["cost"]["usd_per_device_hour"] == 2.0


@pytest.mark.parametrize("extra, needle", [
    (["--price", "tcoo"], "--price: unknown price mode; got 'tcoo'; expected one of cloud, tco; did you mean 'tco'?"),
    (["--price", "tco", "--tco-years", "-1", "--pue", "1.3", "--electricity-usd-per-kwh", "0.1"],
     "--tco-years: got '-1'; expected a finite number > 0"),
    (["--price", "tco", "--tco-years", "4", "--pue", "0.9", "--electricity-usd-per-kwh", "0.1"],
     "--pue: got '0.9'; expected a finite number >= 1"),
    (["--price", "tco", "--pue", "1.3"], "--price tco: --tco-years, --electricity-usd-per-kwh not given"),
    (["--pue", "1.3"], "--pue: a TCO input; got --price cloud; expected --price tco with it"),
    (["--speculative", "llama-foo,k=4,accept=0.7"], "--speculative: model 'llama-foo': unknown model"),
])
def test_serve_bad_price_inputs_exit_2(capsys, extra, needle) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = run_cli(capsys, [*SERVE, *extra])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.mark.parametrize("argv", [
    [*SERVE[:3], "l40s", *SERVE[4:]],
    ["tune", "llama-2-7b", "--serve", "--hardware", "l40s", "--slo", "ttft_p99<=2 s"],
])
def test_tco_of_a_device_without_purchase_price_exit_2(capsys, argv) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = run_cli(capsys, [*argv, *TCO])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--price tco: no purchase_usd for device 'l40s'" in err and "h100-sxm5-80gb" in err, err


def test_tune_without_serve_checks_the_price_options_as_serve(capsys) -> None:  # type: ignore[no-untyped-def]
    rc, _, err = run_cli(capsys, ["tune", "gpt2", "--hardware", "h100-sxm5-80gb", "--pue", "1.2"])
    assert rc == 2 and "--pue: a TCO input; got --price cloud; expected --price tco with it" in err

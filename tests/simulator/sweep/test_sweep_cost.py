"""Cost axes of a sweep ([cost], [axes.cost], metrics usd_per_hour / usd_per_million_items): each row's price
recomputed by hand from its latency, energy and throughput; the default leaves point keys as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.sweep import load_results, run_sweep
from simulator.sweep.experiment import ExperimentError, load_experiment

BASE = """
schema = "nodeperf.experiment/1"
name = "{name}"
{metrics}
[workload]
model = "gpt2"
phase = "decode"
context = 256
[hardware]
name = "h100-sxm5-80gb"
[axes.workload]
batch = [1, 8]
{extra}
"""
PRICES = """schema = 1
[devices.h100-sxm5-80gb]
usd_per_hour = { value = 2.0, source = "a test price" }
purchase_usd = { value = 30000.0, source = "a test purchase price", basis = "server_share" }
"""


def _exp(tmp_path: Path, name: str, extra: str = "", metrics: str = "") -> Path:
    (tmp_path / "prices.toml").write_text(PRICES, encoding="utf-8")
    f = tmp_path / f"{name}.toml"
    f.write_text(BASE.format(name=name, extra=extra, metrics=metrics), encoding="utf-8")
    return f


def test_price_mode_and_electricity_axes_hand_computed(tmp_path: Path) -> None:
    extra = ('[cost]\nprices = "prices.toml"\nyears = 4.0\npue = 1.3\n'
             '[axes.cost]\nmode = ["cloud", "tco"]\nusd_per_kwh = [0.05, 0.20]')
    out = tmp_path / "r.sqlite"
    s = run_sweep(_exp(tmp_path, "c", extra), out, scheduler="synchronous")
    assert (s.total, s.computed, s.errors) == (8, 8, 0)
    df = load_results(out)
    assert {"usd_per_hour", "usd_per_million_items", "cost.mode", "cost.usd_per_kwh"} <= set(df.columns)
    for r in df.to_dict("records"):
        watts = r["energy_j"] / r["latency_s"]  # one device: the run's average power
        hourly = 2.0 if r["cost.mode"] == "cloud" else 30000 / (4 * 8760) + watts / 1000 * 1.3 * r["cost.usd_per_kwh"]
        assert r["usd_per_hour"] == pytest.approx(hourly, rel=1e-12)
        assert r["usd_per_million_items"] == pytest.approx(hourly / 3600 / r["throughput_per_s"] * 1e6, rel=1e-12)
    cloud = df[df["cost.mode"] == "cloud"]
    assert cloud.groupby("workload.batch")["usd_per_hour"].nunique().eq(1).all()  # rent does not see electricity
    tco = df[df["cost.mode"] == "tco"].sort_values(["workload.batch", "cost.usd_per_kwh"])
    assert (tco.groupby("workload.batch")["usd_per_hour"].diff().dropna() > 0).all()  # dearer power, dearer hour


def test_default_cost_leaves_point_keys_unchanged(tmp_path: Path) -> None:
    plain, priced = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    run_sweep(_exp(tmp_path, "a"), plain, scheduler="synchronous")
    run_sweep(_exp(tmp_path, "b", '[cost]\nmode = "cloud"', 'metrics = ["latency_s", "usd_per_hour"]'), priced,
              scheduler="synchronous")
    a, b = load_results(plain), load_results(priced)
    assert sorted(a["point_key"]) == sorted(b["point_key"])
    assert "usd_per_hour" not in a.columns and (b["usd_per_hour"] == 2.99).all()  # the catalog's RunPod 1x_H100-SXM_SECURE


def test_cost_metrics_are_listed_by_default_only_with_cost_settings(tmp_path: Path) -> None:
    assert "usd_per_hour" not in load_experiment(_exp(tmp_path, "p")).metrics
    assert {"usd_per_hour", "usd_per_million_items"} <= set(load_experiment(_exp(tmp_path, "q", "[cost]\nmode = "
                                                                                  '"cloud"')).metrics)


@pytest.mark.parametrize("extra, needle", [
    ('[cost]\nmode = "tco"\npue = 1.2', "cost.mode: tco needs years, usd_per_kwh"),
    ('[cost]\nmode = "tcoo"', "did you mean 'tco'"),
    ('[cost]\npue = 0.9', "cost.pue"),
    ('[cost]\nutilization = 1.5', "cost.utilization: not a fraction"),
    ('[cost]\nyears = 0', "cost.years: must be > 0; got 0"),
    ('[cost]\nprices = "nope.toml"', "cost.prices: no such file; got 'nope.toml'"),
])
def test_bad_cost_settings_are_located(tmp_path: Path, extra: str, needle: str) -> None:
    with pytest.raises(ExperimentError) as e:
        load_experiment(_exp(tmp_path, "x", extra))
    assert needle in str(e.value)


def test_unpriced_device_is_an_error_row(tmp_path: Path) -> None:
    exp = _exp(tmp_path, "u", metrics='metrics = ["usd_per_hour"]')
    text = exp.read_text().replace('name = "h100-sxm5-80gb"', 'name = "mi250x"')
    exp.write_text(text)
    out = tmp_path / "u.sqlite"
    s = run_sweep(exp, out, scheduler="synchronous")
    assert s.errors == 2
    assert all("cost: no price for device" in e for e in load_results(out)["error"])
    assert load_results(out)["usd_per_hour"].isna().all()

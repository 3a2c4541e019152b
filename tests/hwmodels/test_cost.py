"""Device prices (hwmodels/catalog/prices.toml) and the total-cost-of-ownership mode of hwmodels.cost."""

from __future__ import annotations

import re

import pytest

from hwmodels.cost import (
    HOURS_PER_YEAR,
    PRICES_FILE,
    catalog_device_names,
    load_price_entries,
    load_prices,
    tco_usd_per_hour,
    usd_per_hour,
)
from hwmodels.spec import SpecError

#: GPUs and TPUs of the catalog whose on-demand price was read from a source (see prices.toml's header).
PRICED = ("a10", "a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "b200", "h100-pcie-80gb", "h100-sxm5-80gb",
          "h200-sxm-141gb", "l4", "l40s", "mi300x", "t4", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "v100-sxm2-32gb")
#: Devices with a purchase price read from a source (TCO mode; the TPUs' are Epoch AI's estimates).
BOUGHT = ("a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "b200", "h100-pcie-80gb",
          "h100-sxm5-80gb", "h200-sxm-141gb", "mi250x", "mi300x", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e",
          "v100-pcie-32gb", "v100-sxm2-32gb")


def test_catalog_prices_load_with_sources() -> None:
    prices = load_prices()
    assert tuple(sorted(prices)) == PRICED
    for name, p in prices.items():
        assert name in catalog_device_names()
        assert p.usd_per_hour > 0 and p.source and p.date and p.provider and p.instance and p.region, name
        assert not re.search(r"@[a-z]", p.source), f"{name}: an unexpanded reference in {p.source!r}"


def test_every_purchase_price_is_sourced_and_dated() -> None:
    entries = load_price_entries()
    assert tuple(sorted(k for k, v in entries.items() if v.purchase_usd is not None)) == BOUGHT
    assert sorted(set(entries) - set(load_prices())) == ["mi250x", "v100-pcie-32gb"]  # purchase only
    for name in BOUGHT:
        p = entries[name]
        assert p.purchase_usd > 0 and p.purchase_source and p.purchase_date, name
        assert not re.search(r"@[a-z]", p.purchase_source), f"{name}: an unexpanded reference"
    # the rows of Epoch AI's Hardware prices.csv: DGX prices over 8 GPUs, single-unit list prices
    assert entries["a100-sxm4-40gb"].purchase_usd == pytest.approx(199000 / 8)
    assert entries["v100-sxm2-32gb"].purchase_usd == 19928.75 and entries["v100-pcie-32gb"].purchase_usd == 7500.0
    assert entries["a100-pcie-40gb"].purchase_usd == 15000.0 and entries["a100-sxm4-80gb"].purchase_usd == 37500.0


def test_a_purchase_only_device_is_priced_by_tco_not_cloud() -> None:
    q = usd_per_hour("v100-pcie-32gb", "tco", years=5.0, pue=1.0, usd_per_kwh=0.0, power_w=250.0)
    assert q.value == pytest.approx(7500.0 / (5 * 8760))
    with pytest.raises(ValueError, match="no hourly price for 'v100-pcie-32gb'"):
        usd_per_hour("v100-pcie-32gb")


def test_catalog_values_are_the_source_rows() -> None:
    prices = load_prices()
    # the per-device arithmetic of the derived entries (prices.toml shows the instance prices it read)
    assert prices["b200"].usd_per_hour == pytest.approx(63.92 / 8)
    assert prices["tpu-v5p"].usd_per_hour == pytest.approx(24729.6 / 5888)
    assert prices["tpu-v4"].usd_per_hour == pytest.approx(9891.84 / 3072)
    assert prices["h100-sxm5-80gb"].purchase_usd == pytest.approx(270000 / 8)
    assert prices["l40s"].usd_per_hour == 0.8994 and prices["v100-sxm2-32gb"].usd_per_hour == 3.9


def test_tune_keeps_its_price_names() -> None:
    from simulator.sweep import tune_model

    assert tune_model.load_prices is load_prices and tune_model.PRICES_FILE == PRICES_FILE
    assert tune_model.Price("x", 1.0, "s").usd_per_hour == 1.0


def test_tco_hand_computed() -> None:
    # 30,000 USD over 3 years at 50 % utilization: 30000 / (3 * 8760 * 0.5) = 2.28311 USD per useful hour;
    # 1000 W at PUE 1.25 and 0.08 USD/kWh: 1.0 kW * 1.25 * 0.08 = 0.1 USD/h
    total, parts = tco_usd_per_hour(30000.0, years=3.0, utilization=0.5, pue=1.25, usd_per_kwh=0.08, power_w=1000.0)
    assert parts["capex"] == pytest.approx(30000 / (3 * 8760 * 0.5))
    assert parts["energy"] == pytest.approx(0.1)
    assert total == pytest.approx(2.2831050228 + 0.1)
    assert HOURS_PER_YEAR == 8760.0


def test_usd_per_hour_modes() -> None:
    cloud = usd_per_hour("TPU-V6E")
    assert cloud.value == 2.7 and cloud.mode == "cloud" and "tpu-v6e-1" in cloud.how and "us-central1" in cloud.how
    # tco with the price file's purchase price and the datasheet power (h100: 700 W)
    q = usd_per_hour("h100-sxm5-80gb", mode="tco", years=5.0, pue=1.2, usd_per_kwh=0.1)
    assert q.value == pytest.approx(33750 / (5 * 8760) + 0.7 * 1.2 * 0.1)
    assert q.parts["energy"] == pytest.approx(0.084) and "700 W" in q.how and "PUE 1.2" in q.how
    # any device with a caller's purchase price and power
    q = usd_per_hour("mi210", mode="tco", purchase_usd=10000.0, power_w=300.0, years=4.0, utilization=0.8, pue=1.5,
                     usd_per_kwh=0.0)
    assert q.value == pytest.approx(10000 / (4 * 8760 * 0.8))


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"device": "mi250x"}, "no hourly price for 'mi250x'"),
    ({"device": "h100-sxm5-80gb", "mode": "rent"}, "price mode; got 'rent'; expected one of cloud, tco"),
    ({"device": "h100-sxm5-80gb", "mode": "tco", "years": 4.0}, "pue, usd_per_kwh not given"),
    ({"device": "l40s", "mode": "tco", "years": 4.0, "pue": 1.2, "usd_per_kwh": 0.1}, "no purchase price for 'l40s'"),
    ({"device": "h100-sxm5-80gb", "mode": "tco", "years": 4.0, "pue": 0.9, "usd_per_kwh": 0.1}, "pue; got 0.9"),
    ({"device": "h100-sxm5-80gb", "mode": "tco", "years": 4.0, "pue": 1.2, "usd_per_kwh": 0.1, "utilization": 1.5},
     "utilization; got 1.5"),
    ({"device": "h100-sxm5-80gb", "mode": "tco", "years": 0.0, "pue": 1.2, "usd_per_kwh": 0.1}, "years; got 0.0"),
])
def test_bad_price_requests_are_located(kwargs, needle) -> None:  # type: ignore[no-untyped-def]
    device = kwargs.pop("device")
    with pytest.raises(ValueError) as e:
        usd_per_hour(device, **kwargs)
    assert needle in str(e.value)


def _write(tmp_path, body: str):  # type: ignore[no-untyped-def]
    f = tmp_path / "prices.toml"
    f.write_text("schema = 1\n" + body)
    return f


@pytest.mark.parametrize(("body", "needle"), [
    ('[devices.h100-sxm5-80gb]\nusd_per_hour = { value = 2.0, source = "x", sorce = 1 }\n',
     "devices.h100-sxm5-80gb.usd_per_hour.sorce: unknown key; got 'sorce'; expected one of value, source, date, "
     "provider, instance, region, url, note; did you mean 'source'?"),
    ('[devices.h100-sxm5-80gb]\nusd_per_hour = { value = 2.0 }\n',
     "devices.h100-sxm5-80gb.usd_per_hour.source: missing; got nothing; expected source = ..."),
    ('[devices.h100-sxm5-80gb]\nusd_per_hour = { value = 2.0, source = "x" }\nusd_per_hr = 3\n',
     "devices.h100-sxm5-80gb.usd_per_hr: unknown key; got 'usd_per_hr'; expected one of usd_per_hour, "
     "purchase_usd; did you mean 'usd_per_hour'?"),
    ('[devices.h100-sxm5-80gb]\nusd_per_hour = { value = 2.0, source = "x" }\n'
     'purchase_usd = { value = -5, source = "y" }\n',
     "devices.h100-sxm5-80gb.purchase_usd.value: not a positive price; got -5"),
    ('[devices.h100-sxm5-80gb]\nusd_per_hour = { value = true, source = "x" }\n',
     "devices.h100-sxm5-80gb.usd_per_hour.value: not a positive price; got True"),
])
def test_bad_price_files_are_located(tmp_path, body, needle) -> None:  # type: ignore[no-untyped-def]
    f = _write(tmp_path, body)
    with pytest.raises(SpecError) as e:
        load_prices(f)
    assert f"{f}: {needle}" in str(e.value)


def test_unknown_device_is_located_with_a_near_match(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = _write(tmp_path, '[devices.h100-sxm-80gb]\nusd_per_hour = { value = 2.0, source = "x" }\n')
    with pytest.raises(SpecError, match=r"devices\.h100-sxm-80gb: unknown device; got 'h100-sxm-80gb'; expected a "
                                        r"catalog device name; did you mean 'h100-sxm5-80gb'\?"):
        load_prices(f, check_devices=True)
    # a user's file may price a device of its own TOML file unless asked to check
    assert load_prices(f)["h100-sxm-80gb"].usd_per_hour == 2.0


def test_every_problem_is_listed_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = _write(tmp_path, '[devices.l4]\nusd_per_hour = { value = 0, source = "" }\n[devices.t4]\nusd_per_hour = 3\n')
    with pytest.raises(SpecError) as e:
        load_prices(f)
    lines = str(e.value).splitlines()  # a count line, then one indented located line per problem
    assert lines[0].endswith("prices.toml: 3 problems in price file") and len(lines) == 4, lines
    assert all(x.startswith("  ") for x in lines[1:]), lines
    assert any("devices.t4.usd_per_hour: not a table; got 3" in x for x in lines)


#: Each price added from Epoch AI's data set @ 263c40a1: device -> (field, value, a string of its source row).
NEW_ROWS = {
    "a100-pcie-40gb": ("usd_per_hour", 1.29, "lambdalabs.com/service/gpu-cloud"),
    "a100-pcie-80gb": ("purchase_usd", 16338.77, "anafrashop.com/nvidia-a100-80gb-cowos-hbm2-pcie"),
    "h100-pcie-80gb": ("purchase_usd", 24500.0, "marketplace.uvation.com/nvidia-h100-tensor-core-gpu-80gb-pcie"),
    "h200-sxm-141gb": ("purchase_usd", 270565 / 8, "anafrashop.com/nvidia-gpu-baseboard-8-h200"),
    "b200": ("purchase_usd", 47409.13, "deltacomputer.com/nvidia-dgx-b200-1440gb"),
    "mi300x": ("purchase_usd", 25733.71, "interpromicro.com/product/39955-amd-instinct-mi300x"),
    "mi250x": ("purchase_usd", 14500.0, "nextplatform.com/2021/12/06/stacking-up-amd-mi200"),
    "tpu-v4": ("purchase_usd", 5176.0, "arxiv.org/pdf/2405.21015"),
    "tpu-v5e": ("purchase_usd", 1781.0, "1uzExL_0uXw3LllqqyiwzlPNJnME074plrKsPg8NxDcs"),
    "tpu-v5p": ("purchase_usd", 3694.0, "1uzExL_0uXw3LllqqyiwzlPNJnME074plrKsPg8NxDcs"),
    "tpu-v6e": ("purchase_usd", 6518.0, "1uzExL_0uXw3LllqqyiwzlPNJnME074plrKsPg8NxDcs"),
}


@pytest.mark.parametrize("device", sorted(NEW_ROWS))
def test_each_added_price_is_its_source_row(device: str) -> None:
    field, value, where = NEW_ROWS[device]
    p = load_price_entries()[device]
    got, source = (p.usd_per_hour, p.source) if field == "usd_per_hour" else (p.purchase_usd, p.purchase_source)
    assert got == pytest.approx(value, rel=1e-12) and where in source, (device, got, source)
    assert "263c40a159307e917213d1dc433c617e47d55bfe" in source  # the data set's commit, expanded from @hwprices


def test_source_refs_expand_by_whole_name():
    """A reference whose name starts another's (``@epoch`` / ``@epochhw``) expands to its own text only."""
    from hwmodels.cost import _expand
    refs = {"epoch": "Epoch AI", "epochhw": "Epoch AI hardware prices", "later": "rows after @epochhw"}
    assert _expand("@epochhw; @epoch, @unknown", refs) == "Epoch AI hardware prices; Epoch AI, @unknown"
    assert _expand("@later", refs) == "rows after Epoch AI hardware prices"

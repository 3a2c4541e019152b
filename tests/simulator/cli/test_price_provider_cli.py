"""Whose rent each hourly price is (`provider` of a `usd_per_hour`): the catalog's providers, the re-sourced RunPod
values against the rows of the catalog they cite (read by hand), the one warning line of a cloud comparison that
mixes providers (tune, tune --serve, sweep), and the JSON `cost.provider` of each candidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_capture import run_cli

from hwmodels.cost import Price, load_price_entries, load_prices, mixed_provider_warning

GPT2 = ["tune", "gpt2", "--batch", "4", "--dtype", "bf16", "--fusion", "on", "--seq", "128", "--objective", "cost"]
RUNPOD = "RunPod Secure Cloud"

#: Each hourly price's provider, read by hand from its entry in hwmodels/catalog/prices.toml.
CATALOG_PROVIDERS = {
    "a100-sxm4-80gb": RUNPOD, "a100-pcie-80gb": RUNPOD, "h100-sxm5-80gb": RUNPOD, "h100-pcie-80gb": RUNPOD,
    "h200-sxm-141gb": RUNPOD, "b200": RUNPOD, "l4": RUNPOD, "mi300x": RUNPOD,
    "a100-sxm4-40gb": "AWS", "v100-sxm2-32gb": "AWS",  # RunPod's catalog has no A100 40 GB and no V100
    "a10": "Lambda Cloud", "a100-pcie-40gb": "Lambda Cloud",  # nor an A10 or an A100 PCIe 40 GB
    "t4": "Google Cloud",  # nor a T4
    "l40s": "Cudo Compute",  # RunPod's L40S row is inconsistent (its spot price is twice its on-demand price)
    "tpu-v4": "Google Cloud", "tpu-v5e": "Google Cloud", "tpu-v5p": "Google Cloud", "tpu-v6e": "Google Cloud",
}

#: skypilot-org/skypilot-catalog catalogs/v7/runpod/vms.csv @ 0727c2bd, 'Price' column (USD per instance-hour,
#: the same in every zone), read by hand: the 1-GPU instance, and the 8-GPU one over 8 where the file has it.
RUNPOD_ROWS = {
    "h100-sxm5-80gb": ("1x_H100-SXM_SECURE", 2.99, 23.92),  # 8x_H100-SXM_SECURE 23.92 (spot 21.52)
    "a100-sxm4-80gb": ("1x_A100-80GB-SXM_SECURE", 1.89, 15.12),
    "a100-pcie-80gb": ("1x_A100-80GB_SECURE", 1.64, 12.96),  # 12.96 = 8 x 1.62
    "h100-pcie-80gb": ("1x_H100_SECURE", 2.39, 19.12),
    "h200-sxm-141gb": ("1x_H200-SXM_SECURE", 3.99, 31.92),
    "b200": ("8x_B200_SECURE", 7.99, 63.92),  # the entry cites the 8-GPU instance; 1x_B200_SECURE is 7.99 too
    "l4": ("1x_L4_SECURE", 0.44, 3.52),
    "mi300x": ("1x_MI300X_SECURE", 2.49, 19.92),
}


def _warnings(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith("warning: ")]


def test_every_hourly_price_names_its_provider() -> None:
    assert {k: v.provider for k, v in load_prices().items()} == CATALOG_PROVIDERS


def test_runpod_values_are_their_catalog_rows() -> None:
    prices = load_prices()
    for name, (instance, one, eight) in RUNPOD_ROWS.items():
        p = prices[name]
        assert p.instance == instance and p.usd_per_hour == one, name
        # the per-GPU price of the 8-GPU instance is the 1-GPU one, but for the A100 PCIe (12.96 / 8 = 1.62, and
        # 2x_A100-80GB_SECURE 3.24 = 2 x 1.62): the entry prices one GPU, the 1x instance
        assert (p.usd_per_hour == pytest.approx(eight / 8)) is (name != "a100-pcie-80gb"), name
        assert "0727c2bd" in p.url and "0727c2bd" in p.source and instance in p.source, name
    # the H100 SXM was AWS p5.48xlarge $98.32/h / 8 = 12.29 before; the note keeps that provenance
    raw = (Path(__file__).resolve().parents[3] / "hwmodels" / "catalog" / "prices.toml").read_text(encoding="utf-8")
    line = next(x for x in raw.splitlines() if x.startswith("usd_per_hour = { value = 2.99"))
    assert "previously 12.29" in line and "p5.48xlarge" in line


def test_mixed_provider_warning_names_each_device_and_provider() -> None:
    table = load_price_entries()
    line = mixed_provider_warning(["H100-SXM5-80GB", "t4", "a100-sxm4-80gb"], table)
    assert line is not None and line.startswith("warning: ") and "\n" not in line
    assert ("a100-sxm4-80gb (RunPod Secure Cloud), h100-sxm5-80gb (RunPod Secure Cloud), t4 (Google Cloud)"
            in line)
    assert mixed_provider_warning(["h100-sxm5-80gb", "a100-sxm4-80gb", "mi300x"], table) is None  # all RunPod
    assert mixed_provider_warning(["t4", "tpu-v5e"], table) is None  # both Google Cloud
    assert mixed_provider_warning(["h100-sxm5-80gb", "t4"], table, mode="tco") is None  # TCO charges no rent
    assert mixed_provider_warning(["h100-sxm5-80gb", "mi250x"], table) is None  # mi250x has no hourly price
    unstated = {**table, "l4": Price("l4", 0.5, "a user's price")}
    assert "h100-sxm5-80gb (RunPod Secure Cloud), l4 (unstated)" in str(mixed_provider_warning(
        ["h100-sxm5-80gb", "l4"], unstated))


def test_tune_over_two_providers_warns_once_and_names_them(capsys) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb,l40s", "--json"])
    best = json.loads(out)["best"]
    assert rc == 0 and best and all(b["cost"]["provider"] == CATALOG_PROVIDERS[b["cost"]["device"]] for b in best)
    assert {b["cost"]["device"] for b in best} == {"h100-sxm5-80gb", "l40s"}
    warnings = _warnings(err)
    assert len(warnings) == 1 and "h100-sxm5-80gb (RunPod Secure Cloud), l40s (Cudo Compute)" in warnings[0]
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb,l40s"])
    assert rc == 0 and len(_warnings(err)) == 1
    assert "provider h100-sxm5-80gb RunPod Secure Cloud, l40s Cudo Compute" in out
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb,a100-sxm4-80gb", "--json"])  # one provider
    assert rc == 0 and "warning" not in err
    assert {b["cost"]["provider"] for b in json.loads(out)["best"]} == {RUNPOD}


def test_serve_json_cost_names_the_provider(capsys) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = run_cli(capsys, ["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--requests", "8",
                                 "--lengths", "fixed:in=64,out=16", "--json"])
    cost = json.loads(out)["cost"]
    assert rc == 0 and cost["provider"] == RUNPOD and cost["usd_per_device_hour"] == 2.99 and "warning" not in err
    assert cost["usd_total"] == pytest.approx(2.99 * json.loads(out)["makespan_s"] / 3600)


def test_tune_serve_over_two_providers_warns_once(capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["tune", "llama-2-7b", "--serve", "--hardware", "h100-sxm5-80gb,l40s", "--slo", "tpot_p99<=1 s",
            "--lengths", "fixed:in=64,out=8", "--probe-requests", "8", "--probe-seconds", "1", "--qps-min", "1",
            "--qps-max", "4", "--json"]
    rc, out, err = run_cli(capsys, argv)
    doc = json.loads(out)
    assert rc in (0, 1) and doc["model"] == "llama-2-7b", err
    warnings = _warnings(err)
    assert len(warnings) == 1 and "h100-sxm5-80gb (RunPod Secure Cloud), l40s (Cudo Compute)" in warnings[0]
    assert {c["hardware"] for c in doc["ranked"]} == {"h100-sxm5-80gb", "l40s"}
    for c in doc["ranked"]:  # the capacity probe's cost object, with whose rent it charged
        cost = c["cost"]
        assert cost["provider"] == CATALOG_PROVIDERS[c["hardware"]] and cost["device"] == c["hardware"]
        assert cost["usd_per_million_tokens"] == c["usd_per_million_tokens"]
    rc, out, err = run_cli(capsys, [*argv[:4], "h100-sxm5-80gb,a100-sxm4-80gb", *argv[5:]])  # one provider
    assert rc in (0, 1) and "warning" not in err and json.loads(out)["ranked"]


def test_bad_input_of_a_mixed_comparison_stays_one_line(capsys) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb,l40s", "--search", "grid"])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "unknown method 'grid'" in err


SWEEP = """
schema = "nodeperf.experiment/1"
name = "p"
metrics = ["latency_s", "usd_per_hour"]
[workload]
model = "gpt2"
phase = "decode"
context = 256
batch = 1
[axes.hardware]
name = [{names}]
[cost]
mode = "cloud"
"""


@pytest.mark.parametrize("names, warned", [
    ('"h100-sxm5-80gb", "l40s"', "h100-sxm5-80gb (RunPod Secure Cloud), l40s (Cudo Compute)"),
    ('"h100-sxm5-80gb", "a100-sxm4-80gb"', None),
])
def test_sweep_over_two_providers_warns_once(tmp_path, capsys, names, warned) -> None:  # type: ignore[no-untyped-def]
    from simulator.sweep import load_results, run_sweep

    f = tmp_path / "p.toml"
    f.write_text(SWEEP.format(names=names), encoding="utf-8")
    s = run_sweep(f, tmp_path / "r.sqlite", scheduler="synchronous")
    assert (s.total, s.errors) == (2, 0)
    warnings = _warnings(capsys.readouterr().err)
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warned in warnings[0]
    hourly = dict(zip(*(load_results(tmp_path / "r.sqlite")[c] for c in ("hardware.name", "usd_per_hour")),
                      strict=True))
    assert hourly["h100-sxm5-80gb"] == 2.99

"""What each purchase price covers (`basis` of a `purchase_usd`): the catalog's bases read from each entry's note,
the JSON `cost.purchase_basis` of `tune --price tco`, the one warning line of a TCO comparison that mixes bases,
and a bad basis in a user's price file (one located line, exit 2)."""

from __future__ import annotations

import json

from cli_capture import run_cli

from hwmodels.cost import PURCHASE_BASES, load_price_entries, mixed_basis_warning

TCO = ["--price", "tco", "--tco-years", "4", "--pue", "1.3", "--electricity-usd-per-kwh", "0.10"]
GPT2 = ["tune", "gpt2", "--batch", "4", "--dtype", "bf16", "--fusion", "on", "--seq", "128", "--objective", "cost"]

#: Each catalog purchase entry's basis, read by hand from its source and note in hwmodels/catalog/prices.toml.
CATALOG_BASES = {
    "h100-sxm5-80gb": "server_share",  # DGX H100 sale price / 8: CPUs, memory, NVSwitch, NICs included
    "a100-sxm4-40gb": "server_share",  # DGX A100 320 GB release price / 8
    "a100-sxm4-80gb": "server_share",  # DGX A100 640 GB / 8
    "b200": "server_share",  # DGX B200 1440 GB, per GPU
    "v100-sxm2-32gb": "server_share",  # DGX-1 with 8 V100 32 GB / 8
    "h200-sxm-141gb": "board_share",  # HGX H200 8-GPU baseboard / 8, no host share
    "mi300x": "board_share",  # 8 MI300X OAM on the universal baseboard, no host share
    "a100-pcie-80gb": "card",  # a reseller's price of the card alone
    "h100-pcie-80gb": "card",  # a reseller's price of the new card alone
    "a100-pcie-40gb": "card",  # single-unit list price, the card alone
    "v100-pcie-32gb": "card",  # single-unit list price, the card alone
    "mi250x": "module",  # the OAM module alone
    "tpu-v4": "estimate", "tpu-v5e": "estimate", "tpu-v5p": "estimate", "tpu-v6e": "estimate",  # Epoch AI
}


def test_every_catalog_purchase_price_states_its_basis() -> None:
    bought = {k: v.purchase_basis for k, v in load_price_entries().items() if v.purchase_usd is not None}
    assert bought == CATALOG_BASES
    assert set(bought.values()) == set(PURCHASE_BASES)


def test_mixed_basis_warning_names_each_device_and_basis() -> None:
    table = load_price_entries()
    line = mixed_basis_warning(["H100-PCIe-80GB", "h100-sxm5-80gb"], table)
    assert line is not None and line.startswith("warning: ") and "\n" not in line
    assert "h100-pcie-80gb (card), h100-sxm5-80gb (server_share)" in line
    assert mixed_basis_warning(["h100-sxm5-80gb", "b200"], table) is None  # both server shares
    assert mixed_basis_warning(["h100-pcie-80gb", "h100-sxm5-80gb"], table, mode="cloud") is None


def test_tune_over_a_card_and_a_server_share_warns_once(capsys) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb,h100-pcie-80gb", *TCO, "--json"])
    best = json.loads(out)["best"]
    assert rc == 0 and best and all(b["cost"]["purchase_basis"] == CATALOG_BASES[b["cost"]["device"]] for b in best)
    warnings = [x for x in err.splitlines() if x.startswith("warning: ")]
    assert len(warnings) == 1 and "h100-pcie-80gb (card), h100-sxm5-80gb (server_share)" in warnings[0]
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb,h100-pcie-80gb", *TCO])
    assert rc == 0 and "basis h100-pcie-80gb card, h100-sxm5-80gb server_share" in out and "warning: " in err
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb", *TCO, "--json"])  # one basis: no warning
    assert rc == 0 and "warning" not in err
    assert json.loads(out)["best"][0]["cost"]["purchase_basis"] == "server_share"


def test_bad_basis_is_one_located_line_and_exit_2(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "prices.toml"
    f.write_text('schema = 1\n[devices.h100-sxm5-80gb]\nusd_per_hour = { value = 2.0, source = "x" }\n'
                 'purchase_usd = { value = 30000.0, source = "y", basis = "server-share" }\n')
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb", *TCO, "--prices", str(f)])
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and out == "" and len(lines) == 1, err
    assert (f"{f}: devices.h100-sxm5-80gb.purchase_usd.basis: unknown purchase basis; got 'server-share'; expected "
            "one of card, board_share, server_share, module, estimate (what the price covers); did you mean "
            "'server_share'?") in lines[0]
    f.write_text('schema = 1\n[devices.h100-sxm5-80gb]\nusd_per_hour = { value = 2.0, source = "x" }\n'
                 'purchase_usd = { value = 30000.0, source = "y" }\n')
    rc, out, err = run_cli(capsys, [*GPT2, "--hardware", "h100-sxm5-80gb", *TCO, "--prices", str(f), "--json"])
    assert rc == 0 and "warning" not in err  # left out (a file written before the field): unstated, accepted


def test_unstated_basis_is_warned_when_compared() -> None:
    """A price file's purchase without a basis is accepted as unstated; compared with a stated one, it is warned."""
    from hwmodels.cost import Price

    table = load_price_entries()
    table = {**table, "h100-pcie-80gb": Price("h100-pcie-80gb", None, "", "", "", "", "", "", 24500.0, "y", "", "")}
    line = mixed_basis_warning(["h100-pcie-80gb", "h100-sxm5-80gb"], table)
    assert line is not None and "h100-pcie-80gb (unstated), h100-sxm5-80gb (server_share)" in line


def test_serve_names_the_basis_beside_the_purchase_price(capsys) -> None:  # type: ignore[no-untyped-def]
    serve = ["serve", "llama-2-7b", "--hardware", "h100-pcie-80gb", "--requests", "8", "--lengths",
             "fixed:in=64,out=16", *TCO]
    rc, out, _ = run_cli(capsys, [*serve, "--json"])
    cost = json.loads(out)["cost"]
    assert rc == 0 and cost["purchase_basis"] == "card" and cost["source"].startswith("Epoch AI")
    rc, out, _ = run_cli(capsys, serve)
    assert rc == 0 and "(tco: 24500 USD over 4 y" in out and "; purchase basis card)" in out
    rc, out, _ = run_cli(capsys, serve[:-len(TCO)] + ["--json"])  # cloud: the rent has no purchase basis
    assert rc == 0 and "purchase_basis" not in json.loads(out)["cost"]


def test_tune_serve_over_a_board_share_and_a_card_warns_once(capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["tune", "llama-2-7b", "--serve", "--hardware", "h200-sxm-141gb,h100-pcie-80gb", "--slo", "tpot_p99<=1 s",
            "--lengths", "fixed:in=64,out=8", "--probe-requests", "8", "--probe-seconds", "1", "--qps-min", "1",
            "--qps-max", "4", *TCO, "--json"]
    rc, out, err = run_cli(capsys, argv)
    warnings = [x for x in err.splitlines() if x.startswith("warning: ")]
    assert rc in (0, 1) and json.loads(out)["model"] == "llama-2-7b", err
    assert len(warnings) == 1 and "h100-pcie-80gb (card), h200-sxm-141gb (board_share)" in warnings[0]

"""Requests of one output token have no TPOT and no gap between tokens: an SLO on tpot or itl was reported met at
0 s, and the text summary printed TPOT and ITL percentiles of 0 s. The SLO is now one located line and exit 2,
the text says n/a; the JSON keeps its documented zeros (``percentiles``: zeros when empty)."""

from __future__ import annotations

import json

import pytest

from tests.bad_input.contract import cli_exit, one_line

ONE = ("serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths", "fixed:in=100,out=1", "--requests", "5")


@pytest.mark.parametrize("slo", ["tpot_p99<=1 ms", "itl_mean<=1 ms"])
def test_token_gap_slo_without_token_gaps(capsys, slo: str) -> None:
    rc, err = cli_exit(capsys, *ONE, "--slo", slo)
    one_line(rc, err, f"slo '{slo}': no request has more than one output token",
             "got 5 requests of one output token")


def test_text_says_na_and_json_keeps_zeros(capsys) -> None:
    from simulator.cli.main import main

    assert main(list(ONE)) == 0
    out = capsys.readouterr().out
    assert "TPOT  n/a (no request has more than one output token)" in out
    assert "ITL   n/a (no request has more than one output token)" in out
    assert main([*ONE, "--slo", "e2e_p99<=1 s", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["output_tokens"] == s["requests"] == 5 and s["tpot_s"]["p99"] == 0.0 and s["slo"][0]["met"] is True

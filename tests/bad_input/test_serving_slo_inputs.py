"""An SLO percentile outside (0, 100] (``--slo "itl_p101<=1 s"``) is one located line and exit 2 from the SLO
parser, before anything is simulated (NumPy's percentiles take 0 to 100; p0 would bound the fastest request),
for every metric an SLO may bound; ``e2e`` (a metric name with a digit) parses."""

from __future__ import annotations

import pytest

from simulator.serving.metrics import SLO_METRICS, parse_slo
from tests.bad_input.contract import cli_exit, one_line


@pytest.mark.parametrize("metric", SLO_METRICS)
@pytest.mark.parametrize("stat", ["p101", "p0", "p100.5"])
def test_percentile_outside_0_100_before_simulating(capsys, monkeypatch, metric: str, stat: str) -> None:
    import simulator.serving.simulate as sim

    def _no_run(*args: object, **kw: object) -> None:
        raise AssertionError("simulated before the SLO was checked")

    monkeypatch.setattr(sim, "run_loop", _no_run)
    text = f"{metric}_{stat}<=1 s"
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths",
                       "fixed:in=64,out=8", "--requests", "4", "--slo", text)
    one_line(rc, err, f"--slo: percentile '{stat}'", f"got '{text}'", "expected p followed by a number above 0 "
             "and at most 100")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("text", "want"), [("e2e_p99<=3 s", ("e2e", "p99", 3.0)), ("e2e<=500 ms", ("e2e", "p99", 0.5)),
                                            ("itl_p100<=1 s", ("itl", "p100", 1.0)),
                                            ("tpot_p99.9<=40 ms", ("tpot", "p99.9", 0.04))])
def test_bounds_of_the_percentile_grammar(text: str, want: tuple[str, str, float]) -> None:
    metric, stat, bound = parse_slo(text)
    assert (metric, stat) == want[:2] and bound == pytest.approx(want[2])


def test_a_p95_slo_is_computed_and_the_help_says_so(capsys, tmp_path) -> None:
    """``--slo ttft_p95`` is accepted because the SLO computes any percentile: its ``slo`` entry holds the 95th
    percentile of the requests' own TTFTs (the --csv column), and ``serve --help`` states the grammar (it listed
    only p50/p90/p99)."""
    import csv
    import json

    import numpy as np

    from simulator.cli.main import build_parser, main

    out = tmp_path / "r.csv"
    assert main(["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths", "uniform:in=64-512,out=8-32",
                 "--requests", "20", "--slo", "ttft_p95<=2 s", "--json", "--csv", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    ttft = np.array([float(r["ttft_s"]) for r in csv.DictReader(out.open())])
    (entry,) = summary["slo"]
    assert entry["metric"] == "ttft_p95" and entry["met"] is True
    assert entry["value_s"] == pytest.approx(float(np.percentile(ttft, 95)), rel=1e-6)
    assert summary["ttft_s"]["p90"] < entry["value_s"] <= summary["ttft_s"]["max"]
    sub = next(a for a in build_parser(["serve"])._actions if a.dest == "command").choices["serve"]
    help_text = next(a.help for a in sub._actions if a.dest == "slo")
    assert "_pN" in help_text and "p95" in help_text and "_p50|_p90|_p99" not in help_text

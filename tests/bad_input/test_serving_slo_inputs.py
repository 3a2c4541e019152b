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

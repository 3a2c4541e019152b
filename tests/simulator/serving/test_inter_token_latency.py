"""Inter-token latency (ITL): the gaps between a request's consecutive streamed chunks, pooled over requests as
``sglang.bench_serving`` 0.3.0 and vLLM's ``benchmark_serving.py`` pool them, by hand and end to end; its
summary key, per-request CSV column, SLO and validation metrics."""

from __future__ import annotations

import json
import math

import pytest

from simulator.cli import main
from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.engine import Replica
from simulator.serving.metrics import parse_slo
from simulator.serving.scheduler import Limits, Seq

MODEL, HW = "llama-2-7b", "h100-sxm5-80gb"


class _FlatPricer:
    """A prompt iteration costs 20 ms and every decode step ``step``; host time ``host`` per scheduling pass."""

    def __init__(self, step: float, host: float) -> None:
        self.step, self.host = step, host

    def host_time(self, seqs: int) -> float:
        return self.host

    step_host_time = host_time

    def decode_fixed(self, batch: int) -> tuple[float, float]:
        return self.step + self.host, 1.0

    def longest_bound(self, longest: float, context: float = 0.0) -> int:  # noqa: ARG002 - no context dependence
        return 0

    def decode_segment(self, batch: int, context: float, longest: int = 0) -> tuple[float, float, float, float, float]:
        return math.inf, 0.0, 0.0, 0.0, 0.0

    def iteration(self, chunks: list[tuple[int, int]], decodes: int, context: float, sampled: int,
                  verify: int = 1, longest: int = 0) -> tuple[float, float]:
        return 0.020 + self.host, 1.0


def _run_one(steps: int, n_out: int) -> Seq:
    """One 16-token prompt with ``n_out`` output tokens on a replica of its own, run to its end."""
    lim = Limits("orca", max_num_seqs=8, budget=64, block_size=16, shared_blocks=0, swap=False, steps=steps,
                 mixed=False)
    rep = Replica(0, lim, blocks=100, pricer=_FlatPricer(0.010, 0.001))
    q = Seq(0, 0.0, 16, n_out)
    rep.waiting.append(q)
    t: float | None = 0.0
    while t is not None:
        t = rep.step(t, next_arrival=math.inf)
    assert rep.finished == [q]
    return q


def test_one_token_a_chunk_makes_every_gap_a_decode_step():
    """Steps of 10 ms + 1 ms host time: the prompt step ends at 21 ms (first token), then 4 decode steps end at
    32, 43, 54, 65 ms: 4 gaps of 11 ms, and ITL = TPOT = (65 - 21) / 4 ms."""
    q = _run_one(steps=1, n_out=5)
    assert q.first_token == pytest.approx(0.021) and q.finish == pytest.approx(0.065)
    assert list(q.gaps) == pytest.approx([0.011] * 4)
    assert sum(q.gaps) / len(q.gaps) == pytest.approx((q.finish - q.first_token) / (q.n_out - 1))


def test_a_multi_step_block_is_one_chunk():
    """10-step blocks (vLLM 0.6 --num-scheduler-steps 10), 10 ms steps, 1 ms host time once per block: first
    token at 21 ms, then blocks end at 122, 223 and 324 ms (the last runs its 10 steps for the 4 tokens left),
    each handing its tokens over at once: 3 gaps of 101 ms, where TPOT is (324 - 21) / 24 = 12.6 ms."""
    q = _run_one(steps=10, n_out=25)
    assert q.first_token == pytest.approx(0.021) and q.finish == pytest.approx(0.324)
    assert list(q.gaps) == pytest.approx([0.101] * 3)
    assert (q.finish - q.first_token) / (q.n_out - 1) == pytest.approx(0.303 / 24)


def _serve(**kw) -> object:  # type: ignore[no-untyped-def]
    base = dict(arrival="concurrency:n=1", lengths="fixed:in=256,out=32", requests=5)
    return simulate_serving(MODEL, HW, ServeConfig(**{**base, **kw}))


def test_summary_csv_and_blocks_end_to_end():
    """One request at a time, 32 tokens each: one token a step gives 31 gaps a request and ITL mean = TPOT mean;
    10-step blocks give 4 gaps a request (tokens 2-11, 12-21, 22-31, 32), so ITL mean = TPOT mean x 31 / 4."""
    res = _serve()
    s = res.summary
    assert set(s["itl_s"]) == {"p50", "p90", "p99", "mean", "max"}
    assert all(len(r.itl_gaps_s) == 31 for r in res.requests)
    assert s["itl_s"]["mean"] == pytest.approx(s["tpot_s"]["mean"], rel=1e-9)
    head, *rows = res.requests_csv().splitlines()
    assert head.split(",")[-1] == "itl_mean_s" and len(rows) == 5
    assert float(rows[0].split(",")[-1]) == pytest.approx(res.requests[0].tpot_s, rel=1e-6)
    blocks = _serve(scheduler="orca", scheduler_steps=10, mixed_prefill=False, framework="vllm-v0")
    b = blocks.summary
    assert all(len(r.itl_gaps_s) == 4 for r in blocks.requests)
    assert b["itl_s"]["mean"] == pytest.approx(b["tpot_s"]["mean"] * 31 / 4, rel=1e-9)
    assert b["itl_s"]["p50"] > 7 * b["tpot_s"]["p50"]


def test_itl_slo_per_request_and_over_the_run():
    """An SLO on ITL holds over all gaps pooled; a request meets it when the same statistic of its own gaps
    does (a 1 ms bound on the largest gap: no request meets it)."""
    assert parse_slo("itl_p99<=50 ms") == ("itl", "p99", pytest.approx(0.05))
    s = _serve(slo=("itl_p50<=1 s", "itl_max<=1 ms")).summary
    assert [h["met"] for h in s["slo"]] == [True, False]
    assert s["slo"][1]["metric"] == "itl_max" and s["slo"][1]["value_s"] == pytest.approx(s["itl_s"]["max"])
    assert s["slo_attainment"] == 0.0
    with pytest.raises(ServingError, match=r"^slo: unknown metric 'itll'; got 'itll_p99<=1 s'; expected one of "
                                           r"ttft, tpot, e2e, itl; did you mean 'itl'\?$"):
        parse_slo("itll_p99<=1 s")


def test_cli_prints_itl_and_locates_a_bad_slo(capsys):
    base = ["serve", MODEL, "--hardware", HW, "--lengths", "fixed:in=256,out=16", "--requests", "4"]
    assert main([*base, "--json", "--slo", "itl_p99<=1 s"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["slo"][0]["metric"] == "itl_p99" and out["slo"][0]["met"] is True and out["itl_s"]["p50"] > 0
    assert main(base) == 0
    assert "  ITL   p50 " in capsys.readouterr().out
    assert main([*base, "--slo", "itll_p99<=1 s"]) == 2
    assert capsys.readouterr().err.strip() == ("nodeperf: error: --slo: unknown metric 'itll'; got 'itll_p99<=1 s'; "
                                               "expected one of ttft, tpot, e2e, itl; did you mean 'itl'?")


def test_validation_reads_itl_rows(tmp_path):
    from simulator.calibration.serving_validation import COLUMNS, ServingDataError, read_serving_csv

    row = ("r1,sglang,0.3.0,llama-3-8b,a100-sxm4-80gb,1,1,1,bf16,poisson:qps=4,sharegpt,1200,,,orca,itl_p50_s,"
           "0.01193,s,some README table,,2024")
    f = tmp_path / "s.csv"
    f.write_text(",".join(COLUMNS) + "\n" + row + "\n")
    (r,) = read_serving_csv(f)
    assert (r.metric, r.value) == ("itl_p50_s", 0.01193)
    f.write_text(",".join(COLUMNS) + "\n" + row.replace(",s,some", ",ms,some") + "\n")
    with pytest.raises(ServingDataError, match=r":2: unit: got 'ms'; expected 's' for itl_p50_s"):
        read_serving_csv(f)

"""Seeded uniform-length runs pinned to what they gave when recorded, in the regimes of a long run at the
benchmark's lengths (benchmarks/bench_serve.py: prompts 100-2000 tokens, outputs 50-500): vLLM's scheduler on a
KV cache small enough to preempt (recompute, then swap), and the two sliding-window caches (vLLM's hybrid manager,
SGLang's SWA pool). The scheduler's short decode path and the decode runs' block bookkeeping are mechanics only, so
a change to them must leave these exactly: the whole summary, the per-request CSV and the Chrome trace, by digest
(and a few figures to read). A change meant to move results re-records them:
``python tests/simulator/serving/test_uniform_runs_pinned.py`` prints the table."""

from __future__ import annotations

import hashlib
import json

import pytest

from simulator.serving import ServeConfig, simulate_serving

_LENGTHS = "uniform:in=100-2000,out=50-500"
#: name -> (model, hardware, ServeConfig keywords)
RUNS: dict[str, tuple[str, str, dict]] = {
    "vllm-recompute": ("llama-2-7b", "h100-sxm5-80gb", dict(
        arrival="poisson:qps=10", lengths=_LENGTHS, duration_s=20.0, gpu_memory_utilization=0.22)),
    "vllm-swap": ("llama-2-7b", "h100-sxm5-80gb", dict(
        arrival="poisson:qps=10", lengths=_LENGTHS, duration_s=15.0, gpu_memory_utilization=0.22, preemption="swap")),
    "vllm-hybrid": ("gpt-oss-20b", "h100-sxm5-80gb", dict(
        arrival="poisson:qps=8", lengths=_LENGTHS, duration_s=12.0, gpu_memory_utilization=0.515)),
    "sglang-swa": ("gpt-oss-20b", "h100-sxm5-80gb", dict(
        arrival="poisson:qps=8", lengths=_LENGTHS, duration_s=12.0, gpu_memory_utilization=0.515, framework="sglang",
        kv_window_layout="sglang-swa")),
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(name: str) -> dict:
    model, hw, kw = RUNS[name]
    r = simulate_serving(model, hw, ServeConfig(**kw))
    s = r.summary
    return {"requests": s["requests"], "preemptions": s["preemptions"], "makespan_s": s["makespan_s"],
            "ttft_p50_s": s["ttft_s"]["p50"], "itl_p99_s": s["itl_s"]["p99"],
            "summary_sha256": _digest(json.dumps(s, sort_keys=True, default=str)),
            "csv_sha256": _digest(r.requests_csv()),
            "trace_sha256": _digest(json.dumps(r.chrome_trace(), sort_keys=True))}


#: name -> what the run gave when recorded (before the scheduler's short decode path: the same since; the summary
#: digests re-recorded when the summary's config gained prompt_host_s, the prompt step's host time, with every figure,
#: the CSV and the trace unchanged)
RECORDED: dict[str, dict] = {
    "vllm-recompute": {"requests": 174, "preemptions": 54, "makespan_s": 60.265033212335446, "ttft_p50_s": 17.178395494155218, "itl_p99_s": 0.03424843698890534, "summary_sha256": "9b6eaabdf272ca0a", "csv_sha256": "0c2b6e1c465a5773", "trace_sha256": "201f0d1280875b57"},
    "vllm-swap": {"requests": 133, "preemptions": 38, "makespan_s": 45.24753816226893, "ttft_p50_s": 13.932842571261522, "itl_p99_s": 0.029417218309844707, "summary_sha256": "5744a954f0b410af", "csv_sha256": "46bafd808fab1b33", "trace_sha256": "b2f2f607c45643d3"},
    "vllm-hybrid": {"requests": 89, "preemptions": 5, "makespan_s": 16.482178729954256, "ttft_p50_s": 0.0321045019177042, "itl_p99_s": 0.026031851090155378, "summary_sha256": "494d3c9952a6c1d3", "csv_sha256": "1fcbdd0ea063170a", "trace_sha256": "66e336696d5ae997"},
    "sglang-swa": {"requests": 89, "preemptions": 24, "makespan_s": 21.726628608241107, "ttft_p50_s": 3.11362723793674, "itl_p99_s": 0.032108323240233716, "summary_sha256": "4e9379fb0b025456", "csv_sha256": "3364d924375d2bb0", "trace_sha256": "aa556892c00eafe7"},
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_uniform_run_unchanged(name):
    assert _run(name) == RECORDED[name]


if __name__ == "__main__":
    print(json.dumps({n: _run(n) for n in RUNS}, indent=1))

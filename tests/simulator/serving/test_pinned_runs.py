"""Small seeded runs pinned to the figures they gave when recorded: a change to the event loop, the scheduler's
bookkeeping or the iteration pricer's caches that is meant to leave every result alone must leave these exactly
(the summary's figures, and a digest of the per-request CSV and of the Chrome trace, byte for byte). A change
that is meant to move results re-records them: ``python tests/simulator/serving/test_pinned_runs.py`` prints
the table."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from simulator.serving import ServeConfig, simulate_serving

_U = "uniform:in=50-700,out=10-200"
#: name -> (model, hardware, ServeConfig keywords); each mixes several features so the table stays short
CASES: dict[str, tuple[str, str, dict]] = {
    "vllm-recompute-prefix-least-loaded": ("llama-2-7b", "h100-sxm5-80gb", dict(
        arrival="poisson:qps=40", lengths="uniform:in=100-700,out=10-200,prefix=64", requests=150, prefix_cache=True,
        gpu_memory_utilization=0.2, replicas=2, router="least-loaded")),
    "sarathi-swap-round-robin-trace": ("llama-2-7b", "h100-sxm5-80gb", dict(
        arrival="trace:{trace}", scheduler="sarathi", preemption="swap", gpu_memory_utilization=0.2, replicas=2)),
    "orca-speculative": ("gpt3-6.7b", "h100-sxm5-80gb", dict(
        arrival="poisson:qps=8", lengths=_U, requests=80, scheduler="orca", speculative="gpt3-125m,k=4,accept=0.7")),
    "static": ("llama-2-7b", "h100-sxm5-80gb", dict(
        arrival="poisson:qps=10", lengths=_U, requests=100, scheduler="static", max_num_seqs=16)),
    "disaggregated-multi-step-output-lag": ("llama-2-7b", "dgx-h100", dict(
        arrival="poisson:qps=15", lengths=_U, requests=120, framework="vllm-v0", scheduler_steps=8,
        disaggregate="prefill=1,decode=1")),
    "no-evict-closed-loop": ("llama-2-7b", "h100-sxm5-80gb", dict(
        arrival="concurrency:n=32", lengths=_U, requests=150, framework="trt-llm", admission="no-evict",
        gpu_memory_utilization=0.25)),
}

#: name -> the figures recorded (tests/simulator/serving/test_pinned_runs.py run as a script) (all six re-recorded when the Hopper DRAM figure became gpu-stream's triad, 0.946 for MT4G's 0.821)
PINNED: dict[str, dict] = {
    "vllm-recompute-prefix-least-loaded": {
        "ttft_s": {"p50": 0.07286095788334823, "p90": 0.4622404306843679, "p99": 0.6342261494786464, "mean": 0.1661457990329874, "max": 0.6961904276986224},
        "tpot_s": {"p50": 0.006916142202021168, "p90": 0.007420877315319791, "p99": 0.0087205788756236, "mean": 0.006867259559679096, "max": 0.009013549080136454},
        "itl_s": {"p50": 0.006173493031220723, "p90": 0.006294251464476375, "p99": 0.020871418228877836, "mean": 0.006878896013157844, "max": 0.23756825615509403},
        "e2e_s": {"p50": 0.8896430390567485, "p90": 1.4062477462696057, "p99": 1.7452453612113838, "mean": 0.9003533001707016, "max": 2.062742942617027},
        "makespan_s": 5.331844610962598,
        "preemptions": 29,
        "batch_tokens": {"mean": 49.733333333333334, "max": 1377.0, "iterations": 1575},
        "kv_cache_utilization": 0.7476044034789431,
        "energy_j": 4913.145103344824,
        "engine_calls": 321,
        "csv_sha256": "aec444885e7148dc",
        "trace_sha256": "32df44d65ff4c3da",
    },
    "sarathi-swap-round-robin-trace": {
        "ttft_s": {"p50": 1.5619948901324237, "p90": 3.680805731709888, "p99": 3.8938539819972244, "mean": 1.7331267208087573, "max": 3.909351278989321},
        "tpot_s": {"p50": 0.00673159490482588, "p90": 0.007656990299739168, "p99": 0.011163091311289144, "mean": 0.006982766164169213, "max": 0.013249651141720697},
        "itl_s": {"p50": 0.0060590309653454355, "p90": 0.006176380981769647, "p99": 0.02113595985946426, "mean": 0.006811558668279795, "max": 0.6328292695951434},
        "e2e_s": {"p50": 2.680134093470023, "p90": 4.807034205932103, "p99": 5.451837105500523, "mean": 2.8808743564139023, "max": 5.465761659891122},
        "makespan_s": 7.179761659891122,
        "preemptions": 40,
        "batch_tokens": {"mean": 31.06841611996251, "max": 512.0, "iterations": 2134},
        "kv_cache_utilization": 0.7625547042006494,
        "energy_j": 6201.7844992255095,
        "engine_calls": 423,
        "csv_sha256": "02506db4c67e1362",
        "trace_sha256": "a530da587de7e6e6",
    },
    "orca-speculative": {
        "ttft_s": {"p50": 0.017198652696116312, "p90": 0.025213786010983164, "p99": 0.03170811754729194, "mean": 0.017340007201914642, "max": 0.03183861886871231},
        "tpot_s": {"p50": 0.0027435659739701154, "p90": 0.0029107807909470817, "p99": 0.0031954171261673395, "mean": 0.002733479127306264, "max": 0.003476886017389269},
        "itl_s": {"p50": 0.007040538982486133, "p90": 0.007379073081839049, "p99": 0.018883922406261466, "mean": 0.007433181936372995, "max": 0.026336747797405302},
        "e2e_s": {"p50": 0.28210727435853333, "p90": 0.4904983519571389, "p99": 0.5531408708289107, "mean": 0.29534101162226467, "max": 0.5556509221020836},
        "makespan_s": 11.36774096760514,
        "preemptions": 0,
        "batch_tokens": {"mean": 26.776061776061777, "max": 1081.0, "iterations": 1295},
        "kv_cache_utilization": 0.008327367970815795,
        "energy_j": 4208.246132003562,
        "engine_calls": 177,
        "csv_sha256": "0fd24fa391b20c9f",
        "trace_sha256": "d828534c4309de2e",
    },
    "static": {
        "ttft_s": {"p50": 0.6535486759798306, "p90": 1.1868427961706007, "p99": 1.3578556397565638, "mean": 0.6549567649245912, "max": 1.387209104372145},
        "tpot_s": {"p50": 0.005866996998266226, "p90": 0.006099052343863592, "p99": 0.006172855234235021, "mean": 0.005807390208387287, "max": 0.006177066471641971},
        "itl_s": {"p50": 0.005893559376927371, "p90": 0.006150741220236178, "p99": 0.0062743515861063415, "mean": 0.005836812629659667, "max": 0.0062942608187039895},
        "e2e_s": {"p50": 1.3086286249664594, "p90": 2.049411958174834, "p99": 2.414574012275713, "mean": 1.3135243339290912, "max": 2.484125467546466},
        "makespan_s": 13.239008875370086,
        "preemptions": 0,
        "batch_tokens": {"mean": 25.630225080385852, "max": 5245.0, "iterations": 2177},
        "kv_cache_utilization": 0.03696485640214485,
        "energy_j": 5968.760394879376,
        "engine_calls": 166,
        "csv_sha256": "8ff4d1b80d413f55",
        "trace_sha256": "3aa3a6a94bc4ab07",
    },
    "disaggregated-multi-step-output-lag": {
        "ttft_s": {"p50": 0.021593901930900827, "p90": 0.039931921929546366, "p99": 0.049965335039951334, "mean": 0.02398983430491542, "max": 0.05147677761005015},
        "tpot_s": {"p50": 0.006505709699807542, "p90": 0.007639503379567625, "p99": 0.009582833640179195, "mean": 0.006682399399865742, "max": 0.010344811635546037},
        "itl_s": {"p50": 0.04572304890597034, "p90": 0.05002752420626422, "p99": 0.051943702927353286, "mean": 0.034975727625611304, "max": 0.05814402148155651},
        "e2e_s": {"p50": 0.7666615344052634, "p90": 1.1869088364190301, "p99": 1.2876762043310352, "mean": 0.7182580276732999, "max": 1.2913885144654276},
        "makespan_s": 9.97512126737293,
        "preemptions": 0,
        "batch_tokens": {"mean": 33.24846796657381, "max": 952.0, "iterations": 1795},
        "kv_cache_utilization": 0.015989216521065934,
        "energy_j": 6388.40775890091,
        "engine_calls": 340,
        "csv_sha256": "5e0dbcf1a7430ef3",
        "trace_sha256": "f9efd9e65feff107",
    },
    "no-evict-closed-loop": {
        "ttft_s": {"p50": 0.026299198063734153, "p90": 0.1616744250575484, "p99": 0.25079590642709937, "mean": 0.06150143161686086, "max": 0.25079590642709937},
        "tpot_s": {"p50": 0.009187475091321055, "p90": 0.009952221880657752, "p99": 0.01192455069380181, "mean": 0.00899593568462401, "max": 0.013967893436893315},
        "itl_s": {"p50": 0.0074413125188188545, "p90": 0.014432159191751559, "p99": 0.0225724814278756, "mean": 0.008834316963193133, "max": 0.08912148136955098},
        "e2e_s": {"p50": 1.0305072821683237, "p90": 1.7817867618168821, "p99": 1.9236784229198114, "mean": 1.0341008338180036, "max": 1.9891776423223262},
        "makespan_s": 5.396709344137425,
        "preemptions": 0,
        "batch_tokens": {"mean": 120.2061191626409, "max": 8192.0, "iterations": 621},
        "kv_cache_utilization": 0.12439580886842082,
        "energy_j": 2749.0315776374778,
        "engine_calls": 220,
        "csv_sha256": "b2bbdb87f45a58be",
        "trace_sha256": "470ede295a130877",
    },
}


def _trace(tmp: Path) -> str:
    """A 60-request trace of mixed lengths (arrival, prompt and output tokens by a fixed rule)."""
    f = tmp / "trace.csv"
    rows = [f"{0.03 * i + 0.004 * (i % 7):.3f},{200 + (i * 397) % 1500},{20 + (i * 131) % 300}" for i in range(60)]
    f.write_text("arrival_s,input_len,output_len\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return str(f)


def _figures(name: str, tmp: Path) -> dict:
    model, hw, kw = CASES[name]
    kw = {k: (v.format(trace=_trace(tmp)) if k == "arrival" else v) for k, v in kw.items()}
    r = simulate_serving(model, hw, ServeConfig(**kw))
    s = r.summary
    return {"ttft_s": s["ttft_s"], "tpot_s": s["tpot_s"], "itl_s": s["itl_s"], "e2e_s": s["e2e_s"],
            "makespan_s": s["makespan_s"], "preemptions": s["preemptions"], "batch_tokens": s["batch_tokens"],
            "kv_cache_utilization": s["kv_cache_utilization"], "energy_j": s["energy_j"],
            "engine_calls": s["engine_calls"],
            "csv_sha256": hashlib.sha256(r.requests_csv().encode()).hexdigest()[:16],
            "trace_sha256": hashlib.sha256(json.dumps(r.chrome_trace(), sort_keys=True).encode()).hexdigest()[:16]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pinned_run(name, tmp_path):
    assert _figures(name, tmp_path) == PINNED[name]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(json.dumps({n: _figures(n, Path(d)) for n in CASES}, indent=1))

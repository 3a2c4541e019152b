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

#: name -> the figures recorded (tests/simulator/serving/test_pinned_runs.py run as a script) (all six re-recorded when the Hopper DRAM figure became gpu-stream's triad, 0.946 for MT4G's 0.821, and again when the H100 SXM's library GEMVs and skinny GEMMs took cuBLAS's measured Hopper GEMV rate, 0.762)
PINNED: dict[str, dict] = {
    "vllm-recompute-prefix-least-loaded": {
        "ttft_s": {"p50": 0.40653420967256504, "p90": 0.7474309103002216, "p99": 0.9359449805914316, "mean": 0.3706157493166424, "max": 0.9968947178499552},
        "tpot_s": {"p50": 0.007936665943726964, "p90": 0.009184179407414722, "p99": 0.011430708324784279, "mean": 0.008085473598429087, "max": 0.021258905526575146},
        "itl_s": {"p50": 0.007189731522302623, "p90": 0.007270399759164103, "p99": 0.021721373766224517, "mean": 0.007974695021575013, "max": 0.38896789407063226},
        "e2e_s": {"p50": 1.251022102715211, "p90": 1.8047115753313365, "p99": 2.155834127771589, "mean": 1.2217815312860818, "max": 2.1722988575832183},
        "makespan_s": 5.919967920128627,
        "preemptions": 31,
        "batch_tokens": {"mean": 52.99734571997346, "max": 1676.0, "iterations": 1507},
        "kv_cache_utilization": 0.769631355590804,
        "energy_j": 5041.041385659835,
        "engine_calls": 278,
        "csv_sha256": "b395aa15ea863890",
        "trace_sha256": "414d6b995ed86a52",
    },
    "sarathi-swap-round-robin-trace": {
        "ttft_s": {"p50": 1.8749564136324035, "p90": 4.331753378504212, "p99": 4.628352864996582, "mean": 2.0537236521551696, "max": 4.643806198874879},
        "tpot_s": {"p50": 0.007689729977460772, "p90": 0.008423955177856898, "p99": 0.012672221718479895, "mean": 0.00794334032601563, "max": 0.015130052682696906},
        "itl_s": {"p50": 0.007072053846783, "p90": 0.007186173497448878, "p99": 0.021617751522878148, "mean": 0.0077735596882059915, "max": 0.7388286152788603},
        "e2e_s": {"p50": 3.1163907083118954, "p90": 5.612132843328408, "p99": 6.426323315857443, "mean": 3.3635684596178796, "max": 6.485443819839627},
        "makespan_s": 8.199443819839628,
        "preemptions": 40,
        "batch_tokens": {"mean": 31.229392369288743, "max": 512.0, "iterations": 2123},
        "kv_cache_utilization": 0.7615855579243613,
        "energy_j": 6513.308807150393,
        "engine_calls": 429,
        "csv_sha256": "496c5f779afb01f4",
        "trace_sha256": "622617aa556afb31",
    },
    "orca-speculative": {
        "ttft_s": {"p50": 0.018584572380725195, "p90": 0.02575006625305787, "p99": 0.03395295969563939, "mean": 0.018482427585872447, "max": 0.03443856909515919},
        "tpot_s": {"p50": 0.0031309559404180017, "p90": 0.0033256248795744668, "p99": 0.003572437017614925, "mean": 0.0031317419421210274, "max": 0.0038077122689541554},
        "itl_s": {"p50": 0.008130011713680663, "p90": 0.008454921829967432, "p99": 0.019164285644815315, "mean": 0.008517326746649758, "max": 0.02072697675466892},
        "e2e_s": {"p50": 0.32110043442188596, "p90": 0.5620696894790381, "p99": 0.6220586866719874, "mean": 0.33703044791057335, "max": 0.623285752304934},
        "makespan_s": 11.442964675866806,
        "preemptions": 0,
        "batch_tokens": {"mean": 29.114189756507137, "max": 763.0, "iterations": 1191},
        "kv_cache_utilization": 0.010081467634603101,  # the draft's cache shares the blocks (x 1.0703 = 1 + 576 KiB / 8 MiB per block)
        "energy_j": 4081.646378616433,
        "engine_calls": 181,
        "csv_sha256": "fd5ca0cae29f6c16",
        "trace_sha256": "b23829d834fa1cb7",
    },
    "static": {
        "ttft_s": {"p50": 0.800567408166829, "p90": 1.4611431276776958, "p99": 1.7406546830982383, "mean": 0.8519634438194565, "max": 1.7529855324743604},
        "tpot_s": {"p50": 0.007026858910405342, "p90": 0.007421408623481204, "p99": 0.00747429619029007, "mean": 0.0069708452296878805, "max": 0.007476182318247643},
        "itl_s": {"p50": 0.007053389397986276, "p90": 0.007411159696787096, "p99": 0.007570295058561882, "mean": 0.007002900081314689, "max": 0.0075900311673979814},
        "e2e_s": {"p50": 1.6686537086001993, "p90": 2.48360171570256, "p99": 2.7458995542583233, "mean": 1.6421006599941927, "max": 2.7609781254216363},
        "makespan_s": 13.22399742765048,
        "preemptions": 0,
        "batch_tokens": {"mean": 30.786305908337933, "max": 6807.0, "iterations": 1811},
        "kv_cache_utilization": 0.04425834640109767,
        "energy_j": 5498.635403082263,
        "engine_calls": 131,
        "csv_sha256": "7703c2edf1b70299",
        "trace_sha256": "1b4751ea86ae3a9d",
    },
    "disaggregated-multi-step-output-lag": {
        "ttft_s": {"p50": 0.021613883253820854, "p90": 0.039971891092144184, "p99": 0.05002148979819871, "mean": 0.024044866674498486, "max": 0.05153672881965238},
        "tpot_s": {"p50": 0.007688524319235742, "p90": 0.008731964929198848, "p99": 0.012174617679744251, "mean": 0.007944210104074742, "max": 0.012317470194160154},
        "itl_s": {"p50": 0.054205046311516014, "p90": 0.05932537189289455, "p99": 0.06140349166581771, "mean": 0.03995586710364512, "max": 0.06857641092150057},
        "e2e_s": {"p50": 0.8851183172973711, "p90": 1.4161342647824653, "p99": 1.5197613786879585, "mean": 0.847135729009588, "max": 1.5730855057396607},
        "makespan_s": 10.158650858846023,
        "preemptions": 0,
        "batch_tokens": {"mean": 38.47388781431334, "max": 952.0, "iterations": 1551},
        "kv_cache_utilization": 0.018590136977969293,
        "energy_j": 6141.276780861309,
        "engine_calls": 321,
        "csv_sha256": "38a49b2dfb6c73df",
        "trace_sha256": "219cf8dee7e3b655",
    },
    "no-evict-closed-loop": {
        "ttft_s": {"p50": 0.027319643148951966, "p90": 0.16169454395645133, "p99": 0.25083618692178994, "mean": 0.062147594207648475, "max": 0.25083618692178994},
        "tpot_s": {"p50": 0.009965002459966699, "p90": 0.010667449639528433, "p99": 0.012620309205971866, "mean": 0.009800782164528156, "max": 0.014879526530548887},
        "itl_s": {"p50": 0.008421004193787773, "p90": 0.014452320787539108, "p99": 0.02259264302366315, "mean": 0.009645368333074516, "max": 0.08914164296533861},
        "e2e_s": {"p50": 1.134756512467343, "p90": 1.924689105701286, "p99": 2.0753682705736574, "mean": 1.1240383452235987, "max": 2.148090680453538},
        "makespan_s": 5.915227424754175,
        "preemptions": 0,
        "batch_tokens": {"mean": 120.2061191626409, "max": 8192.0, "iterations": 621},
        "kv_cache_utilization": 0.12350349924473157,
        "energy_j": 2856.209101558508,
        "engine_calls": 220,
        "csv_sha256": "f8b9ac45d212131f",
        "trace_sha256": "240193a597a2e17b",
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

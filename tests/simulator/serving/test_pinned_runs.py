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

#: name -> the figures recorded (tests/simulator/serving/test_pinned_runs.py run as a script) (all six re-recorded when the Hopper DRAM figure became gpu-stream's triad, 0.946 for MT4G's 0.821, and again when the H100 SXM's library GEMVs and skinny GEMMs took cuBLAS's measured Hopper GEMV rate, 0.762, and when a GEMM's last wave that leaves SMs idle loaded L2 at one SM's own intake, efficiency.l2_tile_sm_port_ratio; no-evict-closed-loop (trt-llm) re-recorded when TensorRT-LLM's context attention took its measured floor, efficiency.context_fmha_tensor_fraction: last-digit changes and its trace's notes)
PINNED: dict[str, dict] = {
    "vllm-recompute-prefix-least-loaded": {
        "ttft_s": {"p50": 0.3638764285806204, "p90": 0.6909176622048725, "p99": 0.8915730261735816, "mean": 0.35387892013975114, "max": 0.9536500760387776},
        "tpot_s": {"p50": 0.00788277159010006, "p90": 0.008500840468497991, "p99": 0.011811021351630561, "mean": 0.007909286205403052, "max": 0.016811777001952063},
        "itl_s": {"p50": 0.007164804769179689, "p90": 0.007237141258015889, "p99": 0.020665819205811786, "mean": 0.007833460933102802, "max": 0.2791472138033897},
        "e2e_s": {"p50": 1.2088954792008841, "p90": 1.8055975577624372, "p99": 2.040975568281693, "mean": 1.1899703170662568, "max": 2.28268499559399},
        "makespan_s": 5.827929693461134,
        "preemptions": 29,
        "batch_tokens": {"mean": 51.61892247043364, "max": 1494.0, "iterations": 1522},
        "kv_cache_utilization": 0.7723593336252281,
        "energy_j": 5022.866361057708,
        "engine_calls": 270,
        "csv_sha256": "46cac802f612bf19",
        "trace_sha256": "ba575067fdbe27cc",
    },
    "sarathi-swap-round-robin-trace": {
        "ttft_s": {"p50": 1.8618463472667903, "p90": 4.309280873610201, "p99": 4.609297050752839, "mean": 2.045422634748488, "max": 4.624836605811776},
        "tpot_s": {"p50": 0.007658092080524012, "p90": 0.008389878506973508, "p99": 0.012666802883499648, "mean": 0.007913573469902754, "max": 0.015075467898864013},
        "itl_s": {"p50": 0.0070506108774637255, "p90": 0.007164385809766749, "p99": 0.021472133299857088, "mean": 0.007745663017254098, "max": 0.7366203069479702},
        "e2e_s": {"p50": 3.1033782787752027, "p90": 5.592533828494616, "p99": 6.403982787689406, "mean": 3.3505668531558035, "max": 6.461175642921495},
        "makespan_s": 8.175175642921495,
        "preemptions": 40,
        "batch_tokens": {"mean": 31.185324553151457, "max": 512.0, "iterations": 2126},
        "kv_cache_utilization": 0.7607158634442422,
        "energy_j": 6510.1643340024575,
        "engine_calls": 427,
        "csv_sha256": "4be7d6ac006cdcaa",
        "trace_sha256": "ecc6ab7eb4faf255",
    },
    "orca-speculative": {
        "ttft_s": {"p50": 0.01706890708372555, "p90": 0.024288348580186275, "p99": 0.030245505520281872, "mean": 0.017139672619031085, "max": 0.030469601530053153},
        "tpot_s": {"p50": 0.003067370890362877, "p90": 0.0032612401257446147, "p99": 0.0035044559656810846, "mean": 0.003071813393824887, "max": 0.0037597423467417867},
        "itl_s": {"p50": 0.008004095144470647, "p90": 0.008303049065181511, "p99": 0.01872467598820835, "mean": 0.008352502331078216, "max": 0.02025169527014628},
        "e2e_s": {"p50": 0.31693683195354394, "p90": 0.5531068167850707, "p99": 0.6115756645030024, "mean": 0.3295232598013563, "max": 0.6137146841757968},
        "makespan_s": 11.43578275583643,
        "preemptions": 0,
        "batch_tokens": {"mean": 28.75207296849088, "max": 763.0, "iterations": 1206},
        "kv_cache_utilization": 0.009888327732632247,
        "energy_j": 4109.575674858857,
        "engine_calls": 180,
        "csv_sha256": "5ed8c8d69262481f",
        "trace_sha256": "2bb1b60883e7229f",
    },
    "static": {
        "ttft_s": {"p50": 0.7889893969565127, "p90": 1.439635010995173, "p99": 1.7127165238272555, "mean": 0.829454488560221, "max": 1.7250473732033775},
        "tpot_s": {"p50": 0.006998247767617934, "p90": 0.0073894620421484855, "p99": 0.0074423496089573524, "mean": 0.006943101300922247, "max": 0.007444235736914932},
        "itl_s": {"p50": 0.007023739512629135, "p90": 0.007379213115454776, "p99": 0.007538348477229562, "mean": 0.0069749651115101645, "max": 0.007558084586065661},
        "e2e_s": {"p50": 1.6529363198530185, "p90": 2.4509226837618043, "p99": 2.7185558459251333, "mean": 1.6164398020919126, "max": 2.722905405787178},
        "makespan_s": 13.175709350432564,
        "preemptions": 0,
        "batch_tokens": {"mean": 30.786305908337933, "max": 6807.0, "iterations": 1811},
        "kv_cache_utilization": 0.04425322584797184,
        "energy_j": 5491.060456830993,
        "engine_calls": 131,
        "csv_sha256": "e272bff0e51cb373",
        "trace_sha256": "0ea5ed86835b5763",
    },
    "disaggregated-multi-step-output-lag": {
        "ttft_s": {"p50": 0.021410867231075215, "p90": 0.03935022303759015, "p99": 0.04884600817732785, "mean": 0.023562201323977787, "max": 0.05033082605679609},
        "tpot_s": {"p50": 0.007707655429546888, "p90": 0.009060345625794827, "p99": 0.011579712506392052, "mean": 0.007949654135915427, "max": 0.012027198189791682},
        "itl_s": {"p50": 0.053918140416215676, "p90": 0.05902527162834126, "p99": 0.061882619296543595, "mean": 0.03970266401415985, "max": 0.06660644698922447},
        "e2e_s": {"p50": 0.8726784549005933, "p90": 1.396787018758104, "p99": 1.500768739008465, "mean": 0.8447456353501842, "max": 1.5619623094329116},
        "makespan_s": 10.189512801897754,
        "preemptions": 0,
        "batch_tokens": {"mean": 38.20934699103713, "max": 952.0, "iterations": 1562},
        "kv_cache_utilization": 0.018458778943181417,
        "energy_j": 6172.082149421339,
        "engine_calls": 322,
        "csv_sha256": "cd171a97604fae0d",
        "trace_sha256": "263dc32a7a7678b3",
    },
    "no-evict-closed-loop": {
        "ttft_s": {"p50": 0.026911634366328263, "p90": 0.1616945439564514, "p99": 0.25083618692179016, "mean": 0.06179300151143348, "max": 0.25083618692179016},
        "tpot_s": {"p50": 0.00984750160495802, "p90": 0.010524437501908264, "p99": 0.012462040212294658, "mean": 0.009690523068443056, "max": 0.014829412993260904},
        "itl_s": {"p50": 0.008364603642765367, "p90": 0.014294417831267836, "p99": 0.02259264302366315, "mean": 0.009537641103679778, "max": 0.08914164296533877},
        "e2e_s": {"p50": 1.124000208454351, "p90": 1.9029871172566304, "p99": 2.050652011269785, "mean": 1.1118237027525526, "max": 2.124251825563607},
        "makespan_s": 5.855481643662904,
        "preemptions": 0,
        "batch_tokens": {"mean": 120.2061191626409, "max": 8192.0, "iterations": 621},
        "kv_cache_utilization": 0.12339638347666655,
        "energy_j": 2860.975365169633,
        "engine_calls": 220,
        "csv_sha256": "4a4f6b288d58b97e",
        "trace_sha256": "1132c5838d2fde53",
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

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

#: name -> the figures recorded (tests/simulator/serving/test_pinned_runs.py run as a script)
PINNED: dict[str, dict] = {
    "vllm-recompute-prefix-least-loaded": {
        "ttft_s": {"p50": 0.26167839807444393, "p90": 0.6226113988958288, "p99": 0.9984796602916186, "mean": 0.2920334230538169, "max": 1.1729838490000295},
        "tpot_s": {"p50": 0.007670527816728071, "p90": 0.008251199745577247, "p99": 0.01415909249806155, "mean": 0.007704689034587045, "max": 0.014833547219993517},
        "itl_s": {"p50": 0.006835989162099931, "p90": 0.006925903189729521, "p99": 0.021520809425452203, "mean": 0.00757679408430885, "max": 0.18436073526925867},
        "e2e_s": {"p50": 1.0927043588833159, "p90": 1.7213482485800922, "p99": 2.14433935738788, "mean": 1.1007299116523814, "max": 2.2027974078304062},
        "makespan_s": 5.751594100963024,
        "preemptions": 34,
        "batch_tokens": {"mean": 52.90280495759948, "max": 1503.0, "iterations": 1533},
        "kv_cache_utilization": 0.761625571016225,
        "energy_j": 5032.161029602394,
        "engine_calls": 296,
        "csv_sha256": "3dc5e90a1a9d090c",
        "trace_sha256": "45e519fb327b0ced",
    },
    "sarathi-swap-round-robin-trace": {
        "ttft_s": {"p50": 1.7658147844586334, "p90": 4.0924829165109795, "p99": 4.369632789051091, "mean": 1.9411675085111435, "max": 4.3850255255850445},
        "tpot_s": {"p50": 0.007349530290894769, "p90": 0.008110658262727605, "p99": 0.012079492732802457, "mean": 0.007597399530695032, "max": 0.014483371379678436},
        "itl_s": {"p50": 0.006707575025908241, "p90": 0.00682343083680248, "p99": 0.021708467631251782, "mean": 0.007425109739415273, "max": 0.7028382927384935},
        "e2e_s": {"p50": 2.958212175376622, "p90": 5.308834487847895, "p99": 6.082622614919287, "mean": 3.192298499602617, "max": 6.123854992287583},
        "makespan_s": 7.837854992287583,
        "preemptions": 40,
        "batch_tokens": {"mean": 31.170662905500706, "max": 512.0, "iterations": 2127},
        "kv_cache_utilization": 0.7617873230050851,
        "energy_j": 6403.053911497775,
        "engine_calls": 429,
        "csv_sha256": "209da44741c6b2f5",
        "trace_sha256": "7ce082a16a415feb",
    },
    "orca-speculative": {
        "ttft_s": {"p50": 0.018731012365836186, "p90": 0.025163946204234032, "p99": 0.03271798003528805, "mean": 0.01812126644387166, "max": 0.03949821936349318},
        "tpot_s": {"p50": 0.003000295173548952, "p90": 0.0031680983111798083, "p99": 0.0034508692468196477, "mean": 0.0029902058438551525, "max": 0.0037012744845908055},
        "itl_s": {"p50": 0.007755415096200924, "p90": 0.008085275567056672, "p99": 0.01906063575971184, "mean": 0.008136430608167074, "max": 0.026614865085321182},
        "e2e_s": {"p50": 0.31060598093776637, "p90": 0.5373875968175902, "p99": 0.5990684156535349, "mean": 0.32242377118932025, "max": 0.5992816303767778},
        "makespan_s": 11.416763576340417,
        "preemptions": 0,
        "batch_tokens": {"mean": 28.23697068403909, "max": 1081.0, "iterations": 1228},
        "kv_cache_utilization": 0.00904390440556696,
        "energy_j": 4128.740387460347,
        "engine_calls": 184,
        "csv_sha256": "da0a7ff9e16c709b",
        "trace_sha256": "778b16467686fb4b",
    },
    "static": {
        "ttft_s": {"p50": 0.8484741162805798, "p90": 1.3869740242327206, "p99": 2.063157170908746, "mean": 0.8524902315625842, "max": 2.072742862662148},
        "tpot_s": {"p50": 0.006649002261350441, "p90": 0.0069980838467809175, "p99": 0.007087609289108448, "mean": 0.006573059766264913, "max": 0.007091683149629653},
        "itl_s": {"p50": 0.006702466869811019, "p90": 0.00701342337961286, "p99": 0.007185113676589197, "mean": 0.006606778979311802, "max": 0.007205071383840078},
        "e2e_s": {"p50": 1.5760760778105096, "p90": 2.4532709087910396, "p99": 3.304703440009295, "mean": 1.5979331037983349, "max": 3.315887509302992},
        "makespan_s": 13.519880156438203,
        "preemptions": 0,
        "batch_tokens": {"mean": 28.221041982802227, "max": 6637.0, "iterations": 1977},
        "kv_cache_utilization": 0.04121347942342972,
        "energy_j": 5765.49631596383,
        "engine_calls": 159,
        "csv_sha256": "b265d7549afa43fa",
        "trace_sha256": "997a2081677b34d5",
    },
    "disaggregated-multi-step-output-lag": {
        "ttft_s": {"p50": 0.021613836829360356, "p90": 0.03996999738267046, "p99": 0.05044538641895371, "mean": 0.0241455502280277, "max": 0.05205977019733346},
        "tpot_s": {"p50": 0.007327803741029775, "p90": 0.008569446844930797, "p99": 0.01100484045212223, "mean": 0.007578022225194291, "max": 0.011471490037864539},
        "itl_s": {"p50": 0.051251953668306705, "p90": 0.05603780404635117, "p99": 0.05865416156651193, "mean": 0.03831134317301451, "max": 0.06515399075796635},
        "e2e_s": {"p50": 0.833457735547736, "p90": 1.336331894149528, "p99": 1.4550636407369175, "mean": 0.8066547345368491, "max": 1.4694007640136184},
        "makespan_s": 10.121255653364429,
        "preemptions": 0,
        "batch_tokens": {"mean": 36.56766687078996, "max": 952.0, "iterations": 1633},
        "kv_cache_utilization": 0.0177112419505437,
        "energy_j": 6241.117264975174,
        "engine_calls": 320,
        "csv_sha256": "306ff97f720bf979",
        "trace_sha256": "87236ace8a70307b"
    },
    "no-evict-closed-loop": {
        "ttft_s": {"p50": 0.027032530599172766, "p90": 0.16317760777931833, "p99": 0.2529266617203963, "mean": 0.06242281771842006, "max": 0.2529266617203963},
        "tpot_s": {"p50": 0.00970288572741096, "p90": 0.010431628453024104, "p99": 0.012429255310298204, "mean": 0.009534845578557558, "max": 0.01459316274309406},
        "itl_s": {"p50": 0.008066372437262714, "p90": 0.014513683388798881, "p99": 0.022721564124919436, "mean": 0.009375532266291944, "max": 0.08974905394107796},
        "e2e_s": {"p50": 1.1030144414036944, "p90": 1.8790293358054784, "p99": 2.0267720976775125, "mean": 1.094606416688721, "max": 2.097490121162296},
        "makespan_s": 5.741944870698284,
        "preemptions": 0,
        "batch_tokens": {"mean": 120.2061191626409, "max": 8192.0, "iterations": 621},
        "kv_cache_utilization": 0.12383833085585345,
        "energy_j": 2828.3075887759164,
        "engine_calls": 220,
        "csv_sha256": "af05be0d12f82ad9",
        "trace_sha256": "be09e5c7bdeec648",
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

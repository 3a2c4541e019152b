"""`nodeperf serve` and `nodeperf plot serving`: JSON keys, per-request CSV, Chrome trace, located errors."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main

BASE = ["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths", "fixed:in=256,out=32", "--requests", "40",
        "--arrival", "poisson:qps=4"]


def test_json_csv_and_trace(tmp_path, capsys):
    csv, trace = tmp_path / "r.csv", tmp_path / "t.json"
    assert main([*BASE, "--json", "--csv", str(csv), "--trace", str(trace), "--slo", "ttft_p99<=2 s"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 40 and out["output_tokens"] == 40 * 32
    assert out["slo"][0]["met"] is True and out["slo_attainment"] == 1.0
    rows = csv.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 41 and rows[0].split(",")[:4] == ["id", "arrival_s", "input_len", "output_len"]
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    assert events and all(e["ph"] == "X" and e["dur"] > 0 for e in events)
    fig = tmp_path / "f.png"
    assert main(["plot", "serving", str(csv), str(csv), "-o", str(fig)]) == 0 and fig.stat().st_size > 0


def test_table_and_located_errors(capsys):
    assert main(BASE) == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "per million output tokens" in text
    assert main([*BASE, "--arrival", "poisson:qps=0"]) == 2
    assert capsys.readouterr().err.strip() == ("nodeperf: error: arrival: qps: got '0'; expected a positive "
                                               "finite number")
    assert main([*BASE, "--slo", "tpt_p99<=1 s"]) == 2
    assert "did you mean 'tpot'" in capsys.readouterr().err
    assert main([*BASE, "--chunk", "256"]) == 2
    assert "expected scheduler sarathi" in capsys.readouterr().err


def test_swap_preemption_keeps_the_computed_tokens():
    from simulator.serving import ServeConfig, simulate_serving

    base = dict(arrival="burst", lengths="fixed:in=1000,out=1000", requests=200, gpu_memory_utilization=0.3)
    rec = simulate_serving("llama-2-7b", "h100-sxm5-80gb", ServeConfig(**base)).summary
    swp = simulate_serving("llama-2-7b", "h100-sxm5-80gb", ServeConfig(**base, preemption="swap")).summary
    assert rec["preemptions"] > 0 and swp["preemptions"] > 0
    assert swp["output_tokens"] == rec["output_tokens"] == 200 * 1000
    assert rec["batch_tokens"]["iterations"] != swp["batch_tokens"]["iterations"]


def test_scheduler_steps_and_prompts_alone_flags(capsys):
    assert main([*BASE, "--scheduler", "orca", "--scheduler-steps", "10", "--no-mixed-prefill", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["limits"]["scheduler_steps"] == 10 and s["limits"]["mixed_prefill"] is False
    assert s["config"]["scheduler_steps"] == 10 and s["iteration_host_per_seq_s"] == 0.0


def test_a_stack_that_does_not_run_on_the_device_is_refused(capsys):
    # MaxText is a TPU stack: refused on an H100 before anything is simulated, as `predict --framework` refuses it
    assert main([*BASE, "--framework", "maxtext-serial"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vllm" in err[0]
    # located under the flag; serve always runs a stack (default vllm), so no "or no --framework" way out
    assert err[0].startswith("nodeperf: error: --framework maxtext-serial: does not run on h100-sxm5-80gb (NVIDIA gpu)")
    assert "or no" not in err[0]


def test_limits_are_those_the_scheduler_applies(capsys):
    # static batching forms batches of up to max_num_seqs whole requests: no token budget, chunk, multi-step,
    # prompts-alone option or admission policy; the iteration-level schedulers apply theirs (vLLM's defaults on an
    # 80 GB H100: 1024 sequences, 8192 tokens; Sarathi-Serve's budget is its 512-token chunk)
    small = ["--requests", "8", "--lengths", "fixed:in=64,out=16", "--json"]
    want = {"static": {"max_num_seqs": 1024, "max_batched_tokens": None, "chunk": None, "block_size": 16,
                       "scheduler_steps": None, "mixed_prefill": None, "admission": None},
            "vllm": {"max_num_seqs": 1024, "max_batched_tokens": 8192, "chunk": None, "block_size": 16,
                     "scheduler_steps": 1, "mixed_prefill": True, "admission": "max-utilization"},
            "sarathi": {"max_num_seqs": 1024, "max_batched_tokens": 512, "chunk": 512, "block_size": 16,
                        "scheduler_steps": 1, "mixed_prefill": True, "admission": "max-utilization"}}
    for sched, limits in want.items():
        assert main([*BASE[:4], *small, "--scheduler", sched]) == 0
        assert json.loads(capsys.readouterr().out)["limits"] == limits
    assert main([*BASE[:4], *small[:-1], "--scheduler", "static"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "limits" in x)
    assert line == "  limits of the static scheduler: max_num_seqs 1024, block_size 16; no token budget: whole requests"
    assert main([*BASE[:4], *small[:-1], "--scheduler", "vllm"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "limits" in x)
    assert "max_batched_tokens 8192" in line and "max_num_seqs 1024" in line
    # an admission policy static batching does not have is refused, as its token budget is
    assert main([*BASE[:4], *small[:-1], "--scheduler", "static", "--admission", "no-evict"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "admission: got 'no-evict' with scheduler 'static'" in err


@pytest.mark.parametrize("flags, why", [(["--scheduler", "static"], "scheduler 'static'"),
                                        (["--admission", "no-evict"], "admission 'no-evict'")])
def test_swap_with_a_policy_that_never_preempts_is_refused(flags, why, capsys):
    """Static batching and no-evict admission reserve every block a request will need when it starts, so no
    request is ever preempted and ``--preemption swap`` would be dropped without a word (it had been)."""
    assert main([*BASE, *flags, "--preemption", "swap"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"nodeperf: error: preemption: got 'swap' with {why}")
    assert main([*BASE, *flags, "--preemption", "recompute"]) == 0

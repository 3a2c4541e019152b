"""Silent defaults and unchecked inputs of the CLI, each now one located line and exit 2:

- ``tune --serve --objective latency`` ran as max-qps (``latency``, tune's default, was read as "unset");
- ``serve --speculative gpt2,k=100000`` priced a step no request can take (vLLM proposes nothing once
  seq_len + k reaches the draft's context);
- ``serve --block-size 100000``: a KV block longer than the model's context;
- ``serve --measurement-interval '1e300 s'``: windows beyond the simulated clock (320 requests for ``--requests 5``);
- ``predict --phase generate`` beyond a RoPE model's context, where ``serve`` refused the same request;
- ``serve --disaggregate`` on one device: the KV hand-off was priced as an on-device copy;
- the training stacks (fsdp2, megatron-core) costing one device's inference step;
- an experiment's unknown table (``[experiment]``) named no line.
"""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line

H100 = ("--hardware", "h100-sxm5-80gb")
SERVE = ("serve", "llama-2-7b", *H100, "--lengths", "fixed:in=64,out=8", "--requests", "5")


def test_tune_serve_refuses_an_objective_serving_cannot_rank_by(capsys) -> None:
    rc, err = cli_exit(capsys, "tune", "llama-2-7b", "--serve", *H100, "--slo", "ttft_p99<=2 s", "--objective",
                       "latency")
    one_line(rc, err, "--objective: unknown serving objective; got 'latency'; expected max-qps or min-cost")


def test_tune_keeps_latency_as_its_default_objective(capsys) -> None:
    import json

    from simulator.cli.main import main

    assert main(["tune", "gpt2", *H100, "--batch", "1", "--dtype", "bf16", "--fusion", "on", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["objective"] == "latency"


def test_speculative_k_beyond_the_draft_context(capsys) -> None:
    # gpt2's context is 1024 positions, below gpt3-6.7b's 2048 (one vocabulary, 50257 tokens: a draft must share
    # the target's); prompts of 64 tokens: k <= 1024 - 1 - 64 = 959
    serve = ("serve", "gpt3-6.7b", *SERVE[2:])
    rc, err = cli_exit(capsys, *serve, "--speculative", "gpt2,k=100000,accept=0.7")
    one_line(rc, err, "speculative: k: got 100000; expected at most 959", "proposal limit, 1024",
             "the shortest prompt has 64 tokens")
    rc, err = cli_exit(capsys, *serve, "--speculative", "gpt2,k=960,accept=0.7")
    one_line(rc, err, "speculative: k: got 960; expected at most 959")


def test_block_size_beyond_the_context(capsys) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--block-size", "100000")
    one_line(rc, err, "block_size: got 100000 tokens; expected at most the model's context of 4096")


def test_measurement_interval_beyond_the_clock(capsys) -> None:
    # 10 windows of 1.2 x the interval within 2**52 ns = 4.504e6 s: at most 3.75e5 s
    rc, err = cli_exit(capsys, *SERVE, "--measurement-interval", "1e300 s")
    one_line(rc, err, "measurement_interval_s: got 1e+300 s", "expected at most 3.75e+05 s")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("command", [("predict", "llama-2-7b", *H100, "--phase", "generate", "--input-len", "4000",
                                      "--output-len", "500"),
                                     ("serve", "llama-2-7b", *H100, "--lengths", "fixed:in=4000,out=500",
                                      "--requests", "2")])
def test_a_request_beyond_the_context_by_one_rule(capsys, command: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *command)
    one_line(rc, err, "4000 prompt + 500 output tokens; got 4500 tokens; expected at most the model's context of 4096")


def test_disaggregation_on_one_device(capsys) -> None:
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "l4", "--lengths", "fixed:in=64,out=8",
                       "--requests", "5", "--disaggregate", "prefill=1,decode=1")
    one_line(rc, err, "disaggregate: got prefill=1,decode=1 on 'l4'", "expected a --hardware system of 2 or more")


def test_replicas_are_copies_of_the_system_in_help(capsys) -> None:
    from simulator.cli.main import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "each a copy of the --hardware system" in out


@pytest.mark.parametrize("framework", ["fsdp2", "megatron-core"])
def test_training_stack_for_one_device_inference(capsys, framework: str) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", *H100, "--framework", framework, "--phase", "decode")
    one_line(rc, err, f"predict: --framework {framework}: a training stack", "got an inference step (--phase decode)",
             "expected --train")
    assert "that runs on h100-sxm5-80gb:" in err and "sdpa" in err and "vllm" in err and "fsdp2," not in err


def test_training_stack_refusal_names_the_tpus_inference_profiles(capsys) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", "--hardware", "tpu-v5e", "--framework", "maxtext", "--phase", "decode")
    one_line(rc, err, "predict: --framework maxtext: a training stack", "an inference profile that runs on tpu-v5e: "
             "vllm, xla")


def test_experiment_unknown_table_names_its_line(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.toml").write_text('name = "x"\n\n[experiment]\nfoo = 1\n\n[hardware]\nname = "h100-sxm5-80gb"\n'
                                     '\n[workload]\nmodel = "gpt2"\n', encoding="utf-8")
    rc, err = cli_exit(capsys, "sweep", "e.toml", "--out", "r.sqlite")
    one_line(rc, err, "e.toml:3: experiment: unknown key; got 'experiment'")


def test_experiment_missing_key_is_not_placed_on_a_top_level_key_of_the_same_name(capsys, tmp_path,
                                                                                 monkeypatch) -> None:
    from tests.bad_input.contract import several

    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.toml").write_text('name = "x"\n\n[experiment]\nfoo = 1\n\n[workload]\nmodel = "gpt2"\n',
                                     encoding="utf-8")
    rc, err = cli_exit(capsys, "sweep", "e.toml", "--out", "r.sqlite")
    body = several(rc, err, 2, "e.toml", each_names_where=True)
    assert body[0].startswith("  e.toml:3: experiment: unknown key")
    assert body[1].startswith("  e.toml: hardware.name: missing"), body[1]  # not line 1, the experiment's own name


@pytest.mark.parametrize("extra, flag", [
    (("--ep", "2"), "--ep"), (("--cp", "2"), "--cp"), (("--microbatch", "2"), "--microbatch"),
    (("--capacity-factor", "1.25"), "--capacity-factor"), (("--pp", "2"), "--pp"), (("--dp", "2"), "--dp"),
    (("--batch", "4"), "--batch"), (("--train",), "--train"), (("--constraint", "latency_s<=1"), "--constraint"),
])
def test_tune_serve_refuses_model_search_flags(capsys, extra, flag) -> None:
    # the serving search reads --hardware, --tp, --dtype, --framework and the price options only: a plan degree,
    # batch or training flag given beside --serve was dropped without a word and the search ran without it
    rc, err = cli_exit(capsys, "tune", "llama-2-7b", "--serve", *H100, "--slo", "ttft_p99<=2 s", *extra)
    one_line(rc, err, f"tune --serve: {flag} is a model-search option; got {flag} with --serve")

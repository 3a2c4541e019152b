"""Serving deployments no engine can run, each one located line and exit 2 (they had run and been priced):

- ``--disaggregate prefill=6,decode=6`` on dgx-h100 (8 GPUs): twelve replicas handing KV caches over one
  node's NVLink, which only 8 of them can share (the hand-off is priced over that fabric);
- ``--scheduler orca --max-batched-tokens 100`` with 512-token prompts (Orca prefills prompts whole; vLLM without
  chunking ignores a prompt beyond the budget) and ``--scheduler static --max-batched-tokens N`` (no budget there);
- ``--speculative gpt2,...`` drafting Llama 3.1 8B: a draft of another vocabulary (50257 against 128256 token ids)
  proposes tokens the target cannot verify; vLLM asserts the two vocabulary sizes are equal.
"""

from __future__ import annotations

from tests.bad_input.contract import cli_exit, one_line

SMALL = ("--lengths", "fixed:in=64,out=8", "--requests", "5")


def test_disaggregated_pools_beyond_one_node(capsys) -> None:
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "dgx-h100", *SMALL, "--disaggregate",
                       "prefill=6,decode=6")
    one_line(rc, err, "disaggregate: prefill=6,decode=6 x tp 1 x pp 1 = 12 devices",
             "got 'dgx-h100' with 8 devices per node; expected at most 8")
    # tp 2: 3 + 3 replicas of 2 GPUs are 12 too
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "dgx-h100", "--tp", "2", *SMALL,
                       "--disaggregate", "prefill=3,decode=3")
    one_line(rc, err, "prefill=3,decode=3 x tp 2 x pp 1 = 12 devices")
    # a cluster of two nodes: the pools still hand caches over one node's fabric, 8 GPUs
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "dgx-h100x2", *SMALL, "--disaggregate",
                       "prefill=6,decode=6")
    one_line(rc, err, "got 'dgx-h100x2' with 8 devices per node")


def test_disaggregated_pools_filling_one_node_run(capsys) -> None:
    from simulator.cli.main import main

    assert main(["serve", "llama-2-7b", "--hardware", "dgx-h100", "--tp", "2", *SMALL, "--disaggregate",
                 "prefill=2,decode=2", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["devices"] == 8 and out["requests"] == 5


def test_draft_of_another_vocabulary(capsys) -> None:
    rc, err = cli_exit(capsys, "serve", "llama-3.1-8b", "--hardware", "h100-sxm5-80gb", *SMALL, "--speculative",
                       "gpt2,k=4,accept=0.7")
    one_line(rc, err, "speculative: draft 'gpt2' has a vocabulary of 50257 tokens",
             "got target 'llama-3.1-8b' with 128256", "expected a draft of the target's vocabulary")


def test_orca_budget_below_a_whole_prompt(capsys) -> None:
    # Orca prefills prompts whole: a 100-token budget cannot take a 512-token prompt (it had run over the budget)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths",
                       "fixed:in=512,out=8", "--requests", "5", "--scheduler", "orca", "--max-batched-tokens", "100")
    one_line(rc, err, "max_batched_tokens: got 100 with scheduler 'orca'",
             "expected at least the longest prompt (512 tokens, request 0)")


def test_static_batching_has_no_token_budget(capsys) -> None:
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", *SMALL, "--scheduler", "static",
                       "--max-batched-tokens", "4096")
    one_line(rc, err, "max_batched_tokens: got 4096 with scheduler 'static'", "has no token budget")

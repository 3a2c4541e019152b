"""A trace gives every request's lengths; what ``--lengths`` beside it may still say (a shared prefix) is checked
against the trace's prompts, and the summary states the trace's lengths:

- ``--arrival trace:F --lengths fixed:in=10,out=10`` ran the trace's lengths under a spec it never read;
- a prefix of 400 tokens on a trace whose shortest prompt has 100 failed deep in the pricer
  (``attention_graph: query_tokens: got -300``), where a lengths file is refused at its prefix;
- a trace run's JSON ``lengths`` was the unused default ``fixed`` 512 / 128.
"""

from __future__ import annotations

import json

from tests.bad_input.contract import cli_exit, one_line

H100 = ("--hardware", "h100-sxm5-80gb")


def _trace(tmp_path) -> str:
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,input_len,output_len\n0,100,20\n0.5,200,40\n0.5,300,10\n1.25,1000,200\n", encoding="utf-8")
    return str(f)


def test_lengths_without_a_prefix_beside_a_trace(capsys, tmp_path) -> None:
    t = _trace(tmp_path)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", *H100, "--arrival", f"trace:{t}", "--lengths", "fixed:in=10,out=10")
    one_line(rc, err, "--lengths: got 'fixed:in=10,out=10' with --arrival trace:", "whose rows give every request's "
             "lengths; expected no --lengths")


def test_prefix_longer_than_a_trace_prompt(capsys, tmp_path) -> None:
    t = _trace(tmp_path)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", *H100, "--arrival", f"trace:{t}", "--lengths",
                       "fixed:in=500,out=10,prefix=400", "--prefix-cache")
    one_line(rc, err, "lengths: prefix: got 400; expected fewer tokens than the shortest prompt of", "(100, request 0)")
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", *H100, "--arrival", f"trace:{t}", "--lengths",
                       "fixed:in=500,out=10,prefix=100", "--prefix-cache")
    one_line(rc, err, "prefix: got 100", "(100, request 0)")


def test_trace_summary_states_the_trace_lengths(capsys, tmp_path) -> None:
    from simulator.cli.main import main

    t = _trace(tmp_path)
    assert main(["serve", "llama-2-7b", *H100, "--arrival", f"trace:{t}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # (100 + 200 + 300 + 1000) / 4 = 400 prompt tokens, (20 + 40 + 10 + 200) / 4 = 67.5 output tokens
    assert out["lengths"] == {"kind": "trace", "file": t, "in_mean": 400.0, "out_mean": 67.5}
    assert out["input_tokens"] == 1600 and out["output_tokens"] == 270
    assert out["config"]["lengths"] is None  # the run's config does not echo the unused default fixed 512 / 128
    assert main(["serve", "llama-2-7b", *H100, "--arrival", f"trace:{t}", "--lengths", "fixed:in=500,out=10,prefix=50",
                 "--prefix-cache", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lengths"]["shared_prefix_tokens"] == 50
    assert out["config"]["lengths"] == "fixed:in=500,out=10,prefix=50"

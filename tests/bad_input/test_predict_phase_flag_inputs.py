"""Single-device `nodeperf predict` flags that a phase does not read, and a negative board power limit: each is
refused with one located line and exit 2, never dropped.

``--context`` is the KV cache a decode step reads (workloads.zoo: ``context`` is read for ``decode`` only); with
``--phase forward``, ``prefill``, ``generate`` or no phase, the prediction was the same as without it. A board power
limit ``NAME@-5w`` was answered as if the GPU had no power limits at all.
"""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line

EXPECT_CONTEXT = "expected --phase decode, or no --context"

CASES = [
    ("context-forward", ("gpt2", "--phase", "forward", "--context", "10"),
     "nodeperf: error: --context 10: the KV cache a decode step reads; got --phase forward; "
     f"{EXPECT_CONTEXT}"),
    ("context-prefill", ("gpt2", "--phase", "prefill", "--context", "10"),
     "nodeperf: error: --context 10: the KV cache a decode step reads; got --phase prefill; "
     f"{EXPECT_CONTEXT}"),
    ("context-default-phase", ("gpt2", "--context", "10"),
     "nodeperf: error: --context 10: the KV cache a decode step reads; got no --phase (the model's "
     f"default: prefill for a decoder, else forward); {EXPECT_CONTEXT}"),
    ("context-cnn", ("resnet50", "--context", "3"),
     "nodeperf: error: --context 3: the KV cache a decode step reads; got no --phase (the model's "
     f"default: prefill for a decoder, else forward); {EXPECT_CONTEXT}"),
    ("context-generate", ("gpt2", "--phase", "generate", "--context", "10", "--input-len", "5", "--output-len", "3"),
     "nodeperf: error: --context 10: the KV cache a decode step reads; got --phase generate (its prompt "
     f"is --input-len); {EXPECT_CONTEXT}"),
    ("context-plan", ("gpt2", "--phase", "prefill", "--context", "10", "--tp", "1"),
     "nodeperf: error: --context 10: the KV cache a decode step reads; got --phase prefill; "
     f"{EXPECT_CONTEXT}"),
    ("input-len-no-phase", ("gpt2", "--input-len", "5"),
     "nodeperf: error: predict: --input-len/--output-len: they describe a request; got no --phase; expected "
     "--phase generate"),
]


@pytest.mark.parametrize(("argv", "line"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_predict_flag_a_phase_does_not_read_is_refused(capsys, argv, line) -> None:
    rc, err = cli_exit(capsys, "predict", *argv, "--hardware", "a10")
    assert one_line(rc, err) == line


def test_predict_decode_context_still_reads_the_cache(capsys) -> None:
    # the refusal leaves decode alone: a longer cache reads more bytes, so the step is slower
    import json

    from simulator.cli.main import main

    times = []
    for ctx in ("64", "1000"):
        assert main(["predict", "gpt2", "--hardware", "a10", "--phase", "decode", "--context", ctx, "--json"]) == 0
        times.append(json.loads(capsys.readouterr().out)["latency_s"])
    assert times[1] > times[0]


def test_negative_board_power_limit_is_named(capsys) -> None:
    rc, err = cli_exit(capsys, "predict", "gemm:m=64,n=64,k=64", "--hardware", "a10@-5w")
    assert one_line(rc, err) == ("nodeperf: error: a10@-5w: power limit: negative; got '-5w'; expected a positive "
                                 "board power limit (a10@<N>w, N in watts)")


@pytest.mark.parametrize("argv", [("graph", "gpt2", "--phase", "prefill"),
                                  ("plot", "roofline", "gpt2", "--hardware", "a10", "-o", "unused.png")],
                         ids=["graph", "plot-roofline"])
def test_commands_that_build_one_graph_refuse_context_outside_decode(capsys, argv) -> None:
    rc, err = cli_exit(capsys, *argv, "--context", "5")
    got = "--phase prefill" if "--phase" in argv else "no --phase (the model's default: prefill for a decoder, else forward)"
    assert one_line(rc, err) == (f"nodeperf: error: --context 5: the KV cache a decode step reads; got {got}; "
                                 "expected --phase decode, or no --context")

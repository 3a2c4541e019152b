"""Flags a QA pass found taken without a word: each is now one located line and exit 2 (bad input), or a
located warning on stderr (a legitimate truncation), or text that says what the value is.

* ``--schedule interleaved`` without ``--interleave`` (it ran 1F1B);
* ``--recompute custom:`` with no names (it was taken as ``custom``);
* a MoE ``--capacity-factor`` under one buffer row per expert (``1e-9`` dropped nearly every token);
* ``hardware show tpu-v6e-1`` printed "1 chips";
* ``power.idle_w`` under ``NAME@<N>w`` read "0.228 x TDP" beside the board's TDP value, not the limit's;
* ``serve --requests N`` or ``--duration`` beyond a ``trace:`` file ran the trace's rows without a word, and the
  text header named the scheduler but not the stack that priced it;
* two SLOs on one metric and statistic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bad_input.contract import cli_exit, one_line

TRAIN = ("predict", "llama-2-7b", "--hardware", "dgx-h100", "--train", "--microbatch", "1", "--global-batch", "8",
         "--seq", "512")
QWEN = ("predict", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--train", "--microbatch", "1", "--global-batch", "32",
        "--seq", "4096", "--dp", "8", "--ep", "8")


def test_interleaved_schedule_needs_virtual_stages(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli_exit(capsys, *TRAIN, "--pp", "2", "--dp", "4", "--schedule", "interleaved")
    one_line(rc, err, "plan: schedule 'interleaved' with interleave 1; expected interleave >= 2")


@pytest.mark.parametrize("policy", ["custom:", "custom: "])
def test_custom_recompute_needs_names(capsys: pytest.CaptureFixture[str], policy: str) -> None:
    rc, err = cli_exit(capsys, *TRAIN, "--dp", "8", "--recompute", policy)
    one_line(rc, err, "--recompute", "recompute custom: empty name list", f"got {policy!r}",
             "expected custom:NAME=CHOICE")


def test_custom_recompute_alone_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _ = cli_exit(capsys, *TRAIN, "--dp", "8", "--recompute", "custom", "--json")
    assert rc == 0


@pytest.mark.parametrize(("factor", "rows"), [("1e-9", "2.56e-07"), ("0.001", "0.256")])
def test_capacity_factor_under_one_row(capsys: pytest.CaptureFixture[str], factor: str, rows: str) -> None:
    # Qwen3-30B-A3B: 128 experts, top-8; a 4,096-token microbatch routes 4096 x 8 rows, 256 an expert at F = 1,
    # so F under 1/256 = 0.00391 leaves every expert's buffer under one row
    rc, err = cli_exit(capsys, *QWEN, "--capacity-factor", factor)
    one_line(rc, err, f"capacity_factor {float(factor):g}: under one row per expert",
             f"x 4096 tokens x top_k 8 / 128 experts = {rows} rows", "expected at least 0.00391")


def test_capacity_factor_of_one_row_runs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _ = cli_exit(capsys, *QWEN, "--capacity-factor", "0.00391", "--json")  # 1.0 row: kept
    assert rc == 0


def test_one_chip_is_singular(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli.main import main

    assert main(["hardware", "show", "tpu-v6e-1"]) == 0
    out = capsys.readouterr().out
    assert "1 chips" not in out and "1 TensorCores" not in out
    assert "v6e-1: 1 chip (1 TensorCore, one per chip)" in out
    assert main(["hardware", "show", "tpu-v5p-8"]) == 0
    assert "v5p-8: 4 chips x 2 TensorCores = 8 TensorCores" in capsys.readouterr().out


def test_power_limit_idle_text_names_the_board_tdp() -> None:
    from hwmodels.power_limits import power_limit_overlay
    from simulator.hardware import load_hardware

    board = load_hardware("h100-sxm5-80gb")
    capped = load_hardware("h100-sxm5-80gb@500w")
    assert float(capped.power.idle_w) == float(board.power.idle_w)  # the value is the board's, as before
    src = capped.source_of("power.idle_w").source
    assert "0.228 x TDP" in src and "of its 700 W TDP, not of the 500 W power limit" in src
    assert power_limit_overlay(board, "500w")["values"]["power.idle_w"]["value"] == f"{float(board.power.idle_w)!r} W"


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_len,output_len\n0,100,10\n0.5,120,12\n1.0,90,8\n")
    return f"trace:{path}"


SERVE = ("serve", "gpt2", "--hardware", "h100-sxm5-80gb")


@pytest.mark.parametrize(("flags", "parts"), [
    (("--requests", "10"), ("warning: --requests 10:", "holds 3 requests; running the 3 it has, not 10")),
    (("--requests", "2", "--warmup-requests", "2"),
     ("warning: --requests 2:", "running the 1 it has after 2 warm-up rows, not 2")),
    (("--duration", "1 h"), ("warning: --duration 3600 s: the last request of", "arrives at 1 s; running its 3 "
                             "requests, arrivals over 1 s, not 3600 s")),
])
def test_serve_trace_shorter_than_asked(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        flags: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--arrival", _trace(tmp_path), *flags, "--json")
    assert rc == 0, err
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("nodeperf: warning: "), err
    for p in parts:
        assert p in lines[0], (p, lines[0])


def test_serve_trace_within_asked_is_quiet(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--arrival", _trace(tmp_path), "--requests", "3", "--json")
    assert rc == 0 and err == ""


def test_serve_header_names_the_stack(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from simulator.cli.main import main

    assert main([*SERVE, "--arrival", _trace(tmp_path), "--framework", "sglang"]) == 0
    head = capsys.readouterr().out.split("\n")[0]
    assert "vllm scheduler on the sglang stack: 3 requests" in head, head
    assert main([*SERVE, "--arrival", _trace(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["framework"] == "vllm"


@pytest.mark.parametrize("second", ["ttft_p99<=1 s", "ttft<=1 s"])  # no statistic: p99
def test_duplicate_slo(capsys: pytest.CaptureFixture[str], tmp_path: Path, second: str) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--arrival", _trace(tmp_path), "--slo", "ttft_p99<=2 s", "--slo", second)
    one_line(rc, err, "--slo: ttft_p99 given twice; got 'ttft_p99<=2 s' and", "expected one bound for each metric")


def test_duplicate_slo_through_the_api() -> None:
    from simulator.serving.metrics import ServingError, check_slos

    assert check_slos(["ttft_p99<=2 s", "ttft_p50<=1 s", "tpot_p99<=50 ms"])[2] == ("tpot", "p99", 0.05)
    with pytest.raises(ServingError, match=r"slo: e2e_p90 given twice"):
        check_slos(["e2e_p90<=10 s", "e2e_p90<=5 s"])

"""`nodeperf serve --kv-window-layout`: the layout of sliding-window layers in the KV cache (auto: the framework
profile's), the JSON summary's kv_cache saying which ran, a bad name one located line and exit 2."""

from __future__ import annotations

import json

import pytest
from cli_capture import run_cli

SERVE = ["serve", "gpt-oss-20b", "--hardware", "h100-sxm5-80gb", "--arrival", "burst", "--lengths",
         "fixed:in=64,out=4", "--requests", "2", "--json"]


def _kv(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    rc, out, err = run_cli(capsys, [*SERVE, *flags])
    assert rc == 0, err
    return json.loads(out)["kv_cache"]


def test_serve_kv_window_layout_flag(capsys: pytest.CaptureFixture[str]) -> None:
    # auto: the profile's (vllm: vLLM V1's hybrid manager; sglang: full); the JSON says which layout ran
    assert _kv(capsys, "--framework", "vllm")["window_layout"] == "vllm-hybrid"
    assert _kv(capsys, "--framework", "sglang")["window_layout"] == "full"
    assert _kv(capsys, "--framework", "vllm", "--kv-window-layout", "full")["window_layout"] == "full"
    kv = _kv(capsys, "--framework", "sglang", "--kv-window-layout", "sglang-swa")
    assert kv["window_layout"] == "sglang-swa" and kv["swa_window"] == 128 and kv["swa_full_tokens_ratio"] == 0.8
    assert kv["swa_blocks"] > 0


def test_serve_bad_kv_window_layout_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_cli(capsys, [*SERVE, "--kv-window-layout", "hybrid"])
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(
        "argument --kv-window-layout: unknown KV window layout; got 'hybrid'; expected one of auto, full, "
        "vllm-hybrid, sglang-swa; did you mean 'vllm-hybrid'?")


def test_tune_serve_takes_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_cli(capsys, ["tune", "gpt-oss-20b", "--serve", "--hardware", "h100-sxm5-80gb", "--slo",
                                    "ttft_p99<=2 s", "--kv-window-layout", "sglang"])
    assert rc == 2 and out == "" and "Traceback" not in err
    assert "unknown KV window layout; got 'sglang'" in err.strip().splitlines()[-1]

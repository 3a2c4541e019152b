"""`predict --help` names every stack profile. A board at a power limit or in a power mode keeps its catalog name
(hwmodels.loader.apply_power_mode), so `predict`'s header names the mode it ran in: ``on dgx-h100@500w`` (it
printed ``on dgx-h100``, the name of the uncapped system, for a step 43% longer); `hardware` says which names take
``@<N>w``."""

from __future__ import annotations

import pytest

from simulator.cli.main import main
from simulator.cli.parallel import mode_suffix


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_mode_suffix() -> None:
    assert mode_suffix("dgx-h100@500W") == "@500w"
    assert mode_suffix("jetson-orin-nano@7w") == "@7w"
    assert mode_suffix("dgx-h100") == mode_suffix(None) == mode_suffix("@500w") == ""


def test_predict_headers_name_the_mode(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "predict", "gpt2", "--hardware", "h100-sxm5-80gb@500w")
    assert out.splitlines()[0].endswith("on h100-sxm5-80gb@500w: 210 ops")
    out = _run(capsys, "predict", "gpt2", "--hardware", "dgx-h100@500w", "--tp", "4")
    assert out.splitlines()[0] == "gpt2 (prefill) on dgx-h100@500w: plan tp 4, 4 device(s)"
    out = _run(capsys, "predict", "gpt2", "--hardware", "h100-sxm5-80gb")
    assert out.splitlines()[0].endswith("on h100-sxm5-80gb: 210 ops")


def test_hardware_listing_names_board_power_limits(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "hardware")
    assert "board power limits (NAME@<N>w" in out and "dgx-h100@500w" in out


def test_predict_help_names_every_framework_profile(capsys: pytest.CaptureFixture[str]) -> None:
    """`predict --help` lists every --framework profile the command accepts (automodel, megatron-lm,
    trt-llm-pytorch, vllm-v0 and sglang-0.3 were accepted but not listed)."""
    import re

    from workloads.frameworks import profile_names

    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    missing = [n for n in profile_names() if not re.search(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", text)]
    assert missing == []

"""Bad board power limits through the real CLI (``--hardware NAME@<N>w``): one located line, exit 2.

A limit above the board's maximum (its TDP, or the sourced ``Max Power Limit``), below its sourced
minimum or at/below its idle power, a limit on a device that is not a GPU, and an unknown mode on a
device with shipped nvpmodel modes: each is one line naming ``NAME@MODE``, what was got and what is
accepted, with exit code 2 and nothing printed on stdout.
"""

from __future__ import annotations

import pytest

from simulator.cli import main
from tests.bad_input.contract import one_line

GEMM = "gemm:m=64,n=64,k=64"

CASES = [
    ("above-max", "h100-sxm5-80gb@800w", ("h100-sxm5-80gb@800w: power limit: above the board's maximum",
                                           "got 800 W", "expected at most 700 W", "Max Power Limit : 700.00 W")),
    ("above-max-96gb", "h100-sxm5-96gb@750w", ("h100-sxm5-96gb@750w", "got 750 W", "expected at most 700 W",
                                                "tuning it up to 700W TDP")),
    ("below-min", "h100-sxm5-80gb@150w", ("h100-sxm5-80gb@150w: power limit: below the board's minimum",
                                           "got 150 W", "expected at least 200 W", "Min Power Limit : 200.00 W")),
    ("below-idle", "a10@30w", ("a10@30w: power limit: below the board's minimum", "got 30 W",
                               "expected at least 34.2 W", "above the idle power")),
    ("below-min-l4", "l4@30w", ("l4@30w: power limit: below the board's minimum", "got 30 W",
                                "expected at least 40 W", "Min Power Limit : 40.00 W")),
    ("above-tdp-no-table", "t4@75w", ("t4@75w: power limit: above the board's maximum", "expected at most 70 W")),
    ("system-above-max", "dgx-h100x2@900w", ("h100-sxm5-80gb@900w", "got 900 W", "expected at most 700 W")),
    ("not-a-gpu", "tpu-v5p@300w", ("tpu-v5p@300w: power limit: a board power limit is set on GPUs only",
                                   "got a tpu")),
    ("no-such-mode", "h100-sxm5-80gb@turbo", ("h100-sxm5-80gb@turbo: power mode: the device has no power modes",
                                              "got 'turbo'", "expected a board power limit on a GPU (h100-sxm5-80gb@<N>w")),
    ("nvpmodel-device", "jetson-agx-orin-64gb@45w", ("jetson-agx-orin-64gb@45w: power mode: unknown mode",
                                                      "expected one of 15w, 30w, 50w, 60w")),
]


@pytest.mark.parametrize(("hardware", "parts"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_power_limit_is_one_located_line(capsys: pytest.CaptureFixture[str], hardware: str,
                                             parts: tuple[str, ...]) -> None:
    try:
        rc = main(["predict", GEMM, "--hardware", hardware])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    one_line(rc, err, *parts)
    assert out == ""


def test_limits_in_range_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", GEMM, "--hardware", "h100-sxm5-96gb@700w"]) == 0
    assert main(["hardware", "show", "dgx-b200x2@800w"]) == 0
    assert "at a 800 W power limit" in capsys.readouterr().out

"""``nodeperf`` run in-process with its exit code and captured streams (tests of the CLI's output and errors)."""

from __future__ import annotations

import pytest

from simulator.cli.main import main


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``nodeperf argv``: 0 when ``main`` returns None, a SystemExit's code."""
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err

"""The bad-input contract both CLI suites check (convention 6): exit 2, no traceback, ``nodeperf: error: ``,
one line for one problem, else a count line, at most 20 located lines and ``... and N more``."""

from __future__ import annotations

from typing import Any

from nodeperf.suggest import MAX_LISTED_PROBLEMS

PREFIX = "nodeperf: error: "


def cli_exit(capsys: Any, *argv: str) -> tuple[int, str]:
    """Exit code and standard error of ``nodeperf argv`` run in-process (argparse's own errors exit through
    SystemExit)."""
    from simulator.cli.main import main

    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = int(exc.code or 0)
    return rc, capsys.readouterr().err


def one_line(rc: int, err: str, *parts: str) -> str:
    """Assert the one-problem contract and that the line holds every one of ``parts``; return it."""
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX), err
    for part in parts:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    return lines[0]


def several(rc: int, err: str, n: int, where: str, *, each_names_where: bool = False) -> list[str]:
    """Assert the several-problems contract for ``n`` problems of input ``where``; return the located lines
    (each naming ``where`` too when ``each_names_where``)."""
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.rstrip("\n").split("\n")
    assert lines[0].startswith(PREFIX) and f": {n} problems in " in lines[0] and where in lines[0], lines[0]
    body = lines[1:]
    shown = min(n, MAX_LISTED_PROBLEMS)
    if n > shown:
        assert body[-1] == f"  ... and {n - shown} more"
        body = body[:-1]
    assert len(body) == shown, err
    for ln in body:
        assert ln.startswith("  ") and ":" in ln, ln
        assert not each_names_where or where in ln, ln
    return body

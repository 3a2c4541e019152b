"""A bad ``--fp8-accumulation`` (predict, serve): one located line, exit 2, with the choices and a did-you-mean."""

from __future__ import annotations

import pytest
from contract import cli_exit, one_line


@pytest.mark.parametrize("argv, parts", [
    (("predict", "gpt2", "--hardware", "h100-sxm5-80gb", "--fp8-accumulation", "splt"),
     ("--fp8-accumulation", "unknown fp8 accumulation", "got 'splt'", "expected one of fast, split",
      "did you mean 'split'")),
    (("predict", "gpt2", "--hardware", "h100-sxm5-80gb", "--fp8-accumulation", ""),
     ("--fp8-accumulation", "got ''", "expected one of fast, split")),
    (("serve", "gpt2", "--hardware", "h100-sxm5-80gb", "--fp8-accumulation", "Fast"),
     ("--fp8-accumulation", "got 'Fast'", "expected one of fast, split", "did you mean 'fast'")),
])
def test_bad_fp8_accumulation_is_one_located_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                                 parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *argv)
    one_line(rc, err, *parts)

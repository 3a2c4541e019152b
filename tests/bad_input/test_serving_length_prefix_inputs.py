"""A shared prefix that leaves no room under a data set's prompt cap (``--lengths sharegpt:prefix=N``) is one
located line and exit 2: every prompt would become ``N + 1`` tokens, outside the filter the data set's summary
applies (ShareGPT as the serving benchmarks sample it: prompts up to 1024 tokens)."""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line


@pytest.mark.parametrize("prefix", [5000, 1024])
def test_sharegpt_prefix_beyond_the_prompt_cap(capsys, prefix: int) -> None:
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths",
                       f"sharegpt:prefix={prefix}", "--requests", "4")
    one_line(rc, err, "sharegpt: prefix", f"got {prefix}", "expected fewer than 1024 tokens", "in <= 1024")
    assert capsys.readouterr().out == ""


def test_lognormal_prefix_at_its_prompt_cap(capsys) -> None:
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths",
                       "lognormal:in_mean=60,in_sigma=0.5,out_mean=20,out_sigma=0.5,in_max=100,prefix=100",
                       "--requests", "4")
    one_line(rc, err, "prefix: got 100", "expected fewer than 100 tokens")

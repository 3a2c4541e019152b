"""Bad Megatron-Core recompute modules and expert tensor parallelism on the command line: one located line,
exit 2."""

from __future__ import annotations

import pytest
from contract import cli_exit, one_line

from simulator.cli.main import main

MOE = ("predict", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--train", "--microbatch", "1", "--seq", "512",
       "--tp", "2", "--dp", "4", "--sequence-parallel")


run = cli_exit


@pytest.mark.parametrize("argv, parts", [
    (("--recompute", "modules:layernorm,moe_ac"), ("--recompute", "unknown Megatron-Core module", "'moe_ac'",
                                                   "did you mean 'moe_act'")),
    (("--recompute", "modules:"), ("--recompute", "empty module name", "modules:NAME")),
    (("--recompute", "modules:mlp,mlp"), ("--recompute", "'mlp' given twice")),
    (("--recompute", "module:mlp"), ("--recompute", "'module:mlp'", "modules:NAME")),
    (("--ep", "8"), ("ep 8 does not divide dp 4", "--etp 1")),
    (("--ep", "8", "--etp", "1", "--dp", "2"), ("ep 8 does not divide tp x dp 4",)),
    (("--ep", "8", "--etp", "3"), ("etp: got 3 with tp 2", "expected 1 or tp")),
])
def test_bad_module_policy_or_expert_plan_is_one_located_line(capsys: pytest.CaptureFixture[str],
                                                              argv: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = run(capsys, *MOE, *argv)
    one_line(rc, err, *parts)



def test_a_folded_expert_plan_with_module_recomputation_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The good counterpart: ep 8 over tp 2 x dp 4 with etp 1 is accepted and says so in its plan line."""
    assert main([*MOE, "--ep", "8", "--etp", "1", "--recompute", "modules:layernorm,moe_act"]) in (0, None)
    assert "plan tp 2, dp 4, ep 8, etp 1 (sequence parallel" in capsys.readouterr().out

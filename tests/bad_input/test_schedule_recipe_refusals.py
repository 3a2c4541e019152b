"""Bad input to --moe-a2a-overlap, --pipeline-microbatches and --grad-sync-per-step: one located line and exit 2
each (what Megatron-Core refuses of overlap_moe_expert_parallel_comm, what the DES engine does not simulate, and
flags that would change nothing)."""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line

QWEN = ("predict", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--train", "--microbatch", "1", "--global-batch", "32",
        "--seq", "4096")


@pytest.mark.parametrize(("flags", "parts"), [
    (("--dp", "8", "--moe-a2a-overlap"),
     ("plan: moe_a2a_overlap: got it with ep 1; expected ep > 1",)),
    (("--pp", "2", "--dp", "4", "--ep", "4", "--moe-a2a-overlap"),
     ("plan: moe_a2a_overlap: got it with pp 2 and schedule '1f1b'; expected schedule 'interleaved'",)),
    (("--dp", "8", "--ep", "8", "--moe-a2a-overlap", "--engine", "des"),
     ("moe_a2a_overlap: got it with engine 'des'; expected engine 'analytical'",)),
    (("--pp", "2", "--dp", "4", "--pipeline-microbatches", "0"),
     ("argument --pipeline-microbatches: got 0; expected a positive integer",)),
    (("--pp", "2", "--dp", "4", "--pipeline-microbatches", "-2"),
     ("argument --pipeline-microbatches: got -2; expected a positive integer",)),
    (("--pp", "2", "--dp", "4", "--pipeline-microbatches", "2.5"),
     ("argument --pipeline-microbatches: got '2.5'; expected a positive integer",)),
    (("--pp", "2", "--dp", "4", "--pipeline-microbatches", "3"),  # 32 / (4 x 1) = 8 microbatches a rank
     ("plan: pipeline_microbatches: got 3 for 8 microbatches a step; expected a divisor of 8 (nearest: 2)",)),
    (("--pp", "2", "--dp", "4", "--pipeline-microbatches", "2", "--engine", "des"),
     ("pipeline_microbatches: got 2 with engine 'des'; expected 0",)),
    (("--dp", "8", "--pipeline-microbatches", "2"),
     ("predict: --pipeline-microbatches 2:", "got --pp 1; expected --pp > 1")),
    (("--pp", "2", "--dp", "4", "--fsdp", "--grad-sync-per-step"),
     ("predict: --grad-sync-per-step:", "got no --pipeline-microbatches; expected --fsdp and --pipeline-microbatches N")),
    (("--pp", "2", "--dp", "4", "--pipeline-microbatches", "2", "--grad-sync-per-step"),
     ("predict: --grad-sync-per-step:", "got no --fsdp; expected --fsdp")),
    # a host sync inside a captured graph, or beside HybridEP's static rank budget (train-144..147's recipe)
    (("--dp", "8", "--ep", "8", "--moe-dispatch", "hybridep", "--moe-a2a-overlap", "--moe-host-sync", "--cuda-graph",
      "full_iteration"), ("plan: moe_host_sync: got true with cuda_graph 'full_iteration'; expected false",)),
    (("--dp", "8", "--ep", "8", "--moe-dispatch", "hybridep", "--moe-host-sync", "--moe-rank-capacity-factor", "1.5"),
     ("plan: moe_host_sync: got true with moe_rank_capacity_factor 1.5; expected false",)),
    # Megatron-Core sets the rank budget for the HybridEP (or NCCL EP) backend only
    (("--dp", "8", "--ep", "8", "--moe-rank-capacity-factor", "1.5"),
     ("plan: moe_rank_capacity_factor: got 1.5 with moe_dispatch 'sparse'; expected moe_dispatch 'hybridep'",)),
])
def test_schedule_recipe_refusals(capsys: pytest.CaptureFixture[str], flags: tuple[str, ...],
                                  parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *QWEN, *flags)
    one_line(rc, err, *parts)


def test_overlap_on_a_dense_model(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", "--train", "--seq", "128", "--global-batch", "8", "--hardware",
                       "dgx-h100", "--dp", "8", "--moe-a2a-overlap")
    one_line(rc, err, "predict: --moe-a2a-overlap: overlaps the expert-parallel all-to-alls; got gpt2, a model with no "
                      "experts; expected an MoE model with --ep > 1")


@pytest.mark.parametrize("flags", [("--moe-a2a-overlap",), ("--pipeline-microbatches", "2")])
def test_schedule_recipes_outside_training(capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, "predict", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--dp", "8", "--ep", "8", "--pp",
                       "2", *flags)
    one_line(rc, err, f"predict: {flags[0]}: a training recipe; got no --train; expected --train")


@pytest.mark.parametrize(("typo", "flag"), [("--moe-a2a-overlp", "--moe-a2a-overlap"),
                                            ("--grad-sync-per-stepp", "--grad-sync-per-step")])
def test_flag_typo_names_the_flag(capsys: pytest.CaptureFixture[str], typo: str, flag: str) -> None:
    rc, err = cli_exit(capsys, *QWEN, "--dp", "8", "--ep", "8", typo)
    one_line(rc, err, f"unrecognized arguments: {typo}; did you mean '{flag}'?")

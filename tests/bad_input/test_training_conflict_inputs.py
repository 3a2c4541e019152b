"""Training flags that contradict each other or the stack, each one located line and exit 2; they were priced
as something else without a word:

- ``--train --dtype int8``: integer weights have no gradients, so the step derived was the forward pass alone,
  priced as a training step (8.06 ms, 'MFU 48.6%' for Llama 3 8B, no backward, no optimizer);
- ``--train --framework vllm`` (or trt-llm, tensorrt, sglang): an inference engine's costing applied to a
  backward pass and an update it never runs (``predict`` and ``tune``);
- with a parallel plan, ``--train --phase decode`` and ``--autocast`` were dropped (one device refuses both),
  and ``--context`` with ``--train`` everywhere (a training step reads no KV cache); ``--pipeline-split`` with
  ``--pp 1`` split nothing;
- ``--fp8-params`` with torchao's recipes (tensorwise, rowwise) and ``--param-dtype`` on GPUs without ``--fsdp``
  were dropped: the step read neither (the same seconds and bytes as without them);
- ``--batch`` refused "with a parallel plan" on one device, where --fp8-linears (or --offload ...) had made the
  command a plan: the message now names the flag.
"""

from __future__ import annotations

import pytest
from contract import cli_exit, one_line

ONE = ("predict", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--train", "--seq", "512")
ONE_B = (*ONE, "--batch", "1")
PLAN = ("predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--dp", "8", "--seq", "512")
_NOT_FLOAT = ("llama-3-8b: weights that are not floating point have no gradients", "got every weight in int8",
              "expected a floating-point dtype", "--fp8-linears int8")


@pytest.mark.parametrize("argv, parts", [
    ((*ONE_B, "--dtype", "int8"), _NOT_FLOAT),
    ((*PLAN, "--dtype", "int8"), _NOT_FLOAT),
    ((*ONE_B, "--framework", "vllm"), ("--framework vllm: an inference engine", "got --train", "fsdp2",
                                       "megatron-core", "or no --train")),
    ((*PLAN, "--framework", "trt-llm"), ("--framework trt-llm: an inference engine", "got --train")),
    ((*PLAN, "--framework", "tensorrt"), ("--framework tensorrt: an inference engine", "got --train")),
    ((*PLAN, "--phase", "decode"), ("--train conflicts with --phase decode", "expected no --phase")),
    ((*ONE_B, "--context", "100"), ("--context 100", "got --train", "expected no --context")),
    ((*PLAN, "--context", "100"), ("--context 100", "got --train", "expected no --context")),
    ((*PLAN, "--pipeline-split", "torchtitan"), ("--pipeline-split torchtitan", "got --pp 1", "expected --pp > 1")),
    ((*PLAN, "--autocast"), ("--autocast", "got a parallel plan", "expected no --autocast with a plan")),
    (("predict", "llama-3-8b", "--hardware", "dgx-h100", "--tp", "8", "--autocast"),
     ("--autocast", "got a parallel plan")),
    ((*PLAN, "--fp8-params", "--fp8-linears", "tensorwise"),
     ("fp8_param: Transformer Engine's fp8 parameters", "got it with fp8_linears tensorwise",
      "expected fp8_linears delayed, current, mxfp8", "fsdp_fp8_all_gather")),
    ((*PLAN, "--fsdp", "--framework", "fsdp2", "--fp8-params", "--fp8-linears", "rowwise"),
     ("fp8_param", "got it with fp8_linears rowwise")),
    ((*PLAN, "--param-dtype", "bf16"), ("param_dtype bf16", "got it without fsdp on 'h100-sxm5-80gb'",
                                        "expected fsdp (--fsdp)")),
    ((*PLAN, "--param-dtype", "bf16", "--zero", "3"), ("param_dtype bf16", "without fsdp")),
    # tune searched training plans under vLLM (best: 'tp 8, vllm, 20.04 ms')
    (("tune", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--framework", "fsdp2,vllm", "--seq", "512"),
     ("--framework vllm: an inference engine", "got --train")),
    ((*ONE_B, "--fp8-linears", "tensorwise"), ("--batch with --train and a parallel plan (--fp8-linears prices the "
                                                "step as a one-device plan); got --batch 1",)),
])
def test_contradictory_training_flags_are_one_located_line(capsys: pytest.CaptureFixture[str],
                                                           argv: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *argv)
    one_line(rc, err, *parts)


def test_a_training_stack_and_the_phase_of_a_step_are_still_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ((*PLAN, "--framework", "fsdp2", "--fsdp"), (*PLAN, "--phase", "train"), (*ONE_B, "--dtype", "fp8_e4m3"),
                 (*PLAN, "--fsdp", "--param-dtype", "bf16"), (*PLAN, "--fp8-params", "--fp8-linears", "delayed")):
        rc, err = cli_exit(capsys, *argv)
        assert rc == 0, err

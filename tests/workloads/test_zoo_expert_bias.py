"""GPT-OSS's expert biases (workloads.zoo.transformer ``expert_bias``) and Megatron-Core's per-expert loop that
adds the second projection's bias (``TEGroupedMLP._apply_bias``: ``t + b * p`` per local expert, ``torch.cat``)."""

from __future__ import annotations

import dataclasses

import pytest

from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo.transformer import zoo_config


def _gpt_oss(layers: int = 1):
    return dataclasses.replace(zoo_config("gpt-oss-120b"), layers=layers)


def _ops(framework: str, ep: int = 8, seq: int = 4096):
    (sg,) = plan_graphs(_gpt_oss(), ParallelPlan(microbatch=1, ep=ep, dp=ep), seq=seq, train=True,
                        framework=framework)
    return {op.name.rsplit(".", 1)[-1]: op for op in sg.graph.ops[:sg.forward_ops]}


def test_gpt_oss_states_expert_biases():
    assert zoo_config("gpt-oss-120b").expert_bias is True
    assert zoo_config("qwen3-30b-a3b").expert_bias is False


def test_megatron_core_adds_the_second_bias_expert_by_expert():
    ops = _ops("megatron-core")
    scale, add, cat = ops["expert_bias_scale"], ops["expert_bias_add"], ops["expert_bias_cat"]
    # 128 experts over EP 8: 16 local experts, 4,096 tokens x top-4 = 16,384 rows on each rank (dropless,
    # balanced), 8 x 128 = 1,024 a local expert; each row's bias scaled by its routing probability, added,
    # then every row copied by the cat
    assert scale.outputs[0].shape == (16, 1024, 2880) and add.outputs[0].shape == (16, 1024, 2880)
    assert cat.inputs[0] is add.outputs[0]
    # one multiply and one add per local expert from Python: 15 framework ops beside the one priced kernel
    assert scale.attrs["host_ops"] == 15 and add.attrs["host_ops"] == 15


def test_probabilities_permuted_into_padded_slots_train():
    # 1,000 tokens x top-4 = 4,000 routed rows do not fill 16 local experts' row blocks evenly (the buffers are
    # padded to a whole capacity): the weights are permuted into the slots as the dispatcher permutes them (a
    # moe_dispatch of the 4,000 weights, 1 wide), and the training step has its backward (the gradient scattered
    # back to the router's weights)
    ops = _ops("megatron-core", seq=1000)
    probs = ops["expert_row_probs"]
    assert probs.kind == "moe_dispatch" and probs.inputs[0].shape == (4000, 1)
    assert probs.outputs[0].shape == (16, ops["expert_bias_add"].outputs[0].shape[1], 1)
    assert ops["expert_row_probs"].attrs["tokens"] == 4000


def test_other_stacks_fuse_the_biases():
    assert not any(name.startswith("expert_bias") for name in _ops(""))


def test_expert_bias_on_a_dense_model_is_refused():
    with pytest.raises(ValueError, match="'llama-3-8b': expert_bias: got True; expected true or false, true only on "
                                         "an MoE model"):
        dataclasses.replace(zoo_config("llama-3-8b"), expert_bias=True)

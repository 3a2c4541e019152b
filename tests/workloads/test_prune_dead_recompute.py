"""A traced rematerialisation runs only the recomputed ops the backward reads (workloads.training.prune_dead_recompute).

Hand count on a 2-layer GPT-2-style decoder: under ``full`` every forward op of a layer is re-emitted before its
backward, but the backward reads neither the MLP's down projection output nor the residual add after it (the
down projection's gradients read its input and its weight; the next layer and the final norm read the layer's
saved output), so those two recomputed ops of each layer are dead; under ``minimal`` the down projection's
output is saved, and only the recomputed residual add is dead. MaxText's profiles prune (JAX's remat_partial_eval
DCE), Megatron-Core's eager re-run does not.
"""

from __future__ import annotations

import dataclasses

import pytest

from workloads.training import prune_dead_recompute, training_graph
from workloads.zoo.transformer import train_forward, zoo_config


def _step(policy: str):
    cfg = dataclasses.replace(zoo_config("gpt2-small"), layers=2)
    return training_graph(train_forward(cfg, batch=1, seq_len=8), recompute=policy)


def _dropped(policy: str) -> list[str]:
    step = _step(policy)
    kept = {op.name for op in prune_dead_recompute(step).ops}
    return sorted(op.name for op in step.ops if op.name not in kept)


def test_full_remat_drops_the_down_projection_and_the_residual_add_of_each_layer():
    assert _dropped("full") == ["layers.0.mlp.down@recompute", "layers.0.mlp_residual@recompute",
                                "layers.1.mlp.down@recompute", "layers.1.mlp_residual@recompute"]


def test_minimal_saves_the_down_projection_so_only_the_residual_add_is_dead():
    assert _dropped("minimal") == ["layers.0.mlp_residual@recompute", "layers.1.mlp_residual@recompute"]


def test_nothing_recomputed_nothing_pruned():
    step = _step("none")
    assert prune_dead_recompute(step) is step


def test_the_next_layer_and_the_final_norm_read_the_saved_layer_output():
    pruned = prune_dead_recompute(_step("full"))
    readers = {op.name: [t.name for t in op.inputs] for op in pruned.ops}
    assert "layers.0.mlp_residual" in readers["layers.1.attn_norm.bwd"]
    assert "layers.1.mlp_residual" in readers["final_norm.bwd"]
    assert not any(n.endswith("mlp_residual@recompute") for ins in readers.values() for n in ins)


def test_pruned_step_keeps_every_gradient_and_reads_only_produced_tensors():
    step, pruned = _step("full"), prune_dead_recompute(_step("full"))
    grads = {t.name for op in step.ops for t in op.outputs if t.name.startswith("grad:")}
    assert grads == {t.name for op in pruned.ops for t in op.outputs if t.name.startswith("grad:")}
    produced = {t.name for op in pruned.ops for t in op.outputs}
    for op in pruned.ops:
        for t in op.inputs:
            assert pruned.producer(t.name) is None or t.name in produced


@pytest.mark.parametrize(("profile", "traced"), [("maxtext", True), ("maxtext-cf", True), ("maxtext-serial", True),
                                                 ("megatron-core", False), ("fsdp2", False)])
def test_only_traced_stacks_prune(profile, traced):
    from workloads.frameworks import get_profile

    assert get_profile(profile).traced_remat is traced

"""A sweep point's options enter its store key only where they differ from what every earlier store saw: the
default options' identity is the recorded field set, so an option added later at its default keeps every
stored point reachable (a new ``EvalOptions`` field must be dropped at its default in ``_options_identity``)."""

from __future__ import annotations

from simulator.sweep.execute import _options_identity

# the default identity's fields as stores have keyed them (unchanged since the store schema's last bump)
RECORDED_DEFAULT_FIELDS = ["allow_tf32", "attention_kernel", "cuda_graphs", "eager_framework", "embedding_onehot",
                           "engine", "fusion", "l2_residency", "plan", "power_cap", "splash_blocks",
                           "splash_fused_bwd", "streams"]


def test_default_identity_keeps_the_recorded_fields() -> None:
    assert sorted(_options_identity({})) == RECORDED_DEFAULT_FIELDS


def test_warm_repeats_enters_the_key_only_when_set() -> None:
    assert "warm_repeats" not in _options_identity({})
    assert _options_identity({"warm_repeats": True})["warm_repeats"] is True

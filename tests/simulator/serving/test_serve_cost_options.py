"""`serve --framework NAME` prices a stack with every cost option its profile states, as `predict` does."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.serving.config import ServeConfig
from simulator.serving.setup import _options


def test_compile_fuses_norms_in_serving_as_in_predict():
    opts, profile = _options(ServeConfig(framework="compile"), None)
    assert profile.cost_options()["norm_fusion"] is True
    assert opts.norm_fusion is True and opts.fusion is True and opts.epilogue_fusion is False


@pytest.mark.parametrize("name", ["compile", "eager", "vllm", "tensorrt"])
def test_every_stated_cost_option_reaches_the_options(name):
    opts, profile = _options(ServeConfig(framework=name), None)
    fields = {f.name for f in dataclasses.fields(opts)}
    for key, value in profile.cost_options().items():
        assert key in fields, key
        assert getattr(opts, key) == value, (name, key)

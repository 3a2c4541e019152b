"""Warnings nodeperf issues through :mod:`warnings` are NodeperfWarning, so a user filters them as one."""

from __future__ import annotations

import warnings

import pytest

from nodeperf import NodeperfWarning
from workloads.ir import GraphBuilder, OpGraph
from workloads.training import training_graph


def _side_weight_graph() -> OpGraph:
    """A loss over x @ w; a second weight w2 feeds a side output the loss never sees."""
    b = GraphBuilder("side", "fp32")
    x, t = b.input("x", (4, 8)), b.input("t", (4, 8))
    w, w2 = b.weight("w", (8, 8)), b.weight("w2", (8, 8))
    h = b.op("matmul", [x, w], name="h")
    b.op("matmul", [x, w2], name="side")
    b.op("mse_loss", [h, t], name="loss")
    return b.build()


def test_a_weight_without_gradient_is_a_nodeperf_warning() -> None:
    with pytest.warns(NodeperfWarning, match=r"graph 'side': 1 weight\(s\) get no gradient from the loss") as rec:
        g = training_graph(_side_weight_graph())
    assert issubclass(NodeperfWarning, UserWarning)
    assert rec[0].filename == __file__  # located at the caller's line
    assert sum(1 for op in g if op.kind == "optimizer_update") == 1  # w only


def test_nodeperf_warnings_filter_as_one() -> None:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", NodeperfWarning)
        training_graph(_side_weight_graph())
    assert rec == []

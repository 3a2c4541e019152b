"""Where a framework row's predicted time goes (``frameworks_validation.row_breakdown``): the device's own time,
the host's launch floors and module calls, and a compiled program's per-call host time, each checked against
counts of the row's graph worked out by hand and the catalog's host-time figures."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from simulator.calibration.frameworks_validation import (
    load_framework_rows,
    predict_framework_row,
    row_breakdown,
)


@pytest.fixture(scope="module")
def rows():
    ms, parsed = load_framework_rows()
    return {m.id: (m, prof, opts) for m, (prof, opts) in zip(ms, parsed, strict=True)}


def _breakdown(rows, row_id):
    m, prof, opts = rows[row_id]
    return m, prof, opts, row_breakdown(m, prof, opts)


def test_eager_vit_batch1_is_host_bound_with_every_kernel_charged(rows):
    # fw-013: HF ViT-B/16, batch 1, eager, A100. 199 kernels: the patch convolution (cuDNN call time) and
    # 198 one-kernel ops at the eager floor; 51 containers the op names show (embed, layers, head, 12 x (layer,
    # attn, attn.core, mlp)) and the 75 module calls of modeling_vit.py they do not (12 x 6 per layer, the two
    # root modules, the embeddings' dropout), each at the container figure; 99 parameter-holding module calls
    # (cls embedding, 12 x (2 norms, q, k, v, out, up, down), final norm, classifier).
    m, prof, opts, b = _breakdown(rows, "fw-013")
    eff = load_device(m.device).efficiency
    assert b["kernels"] == 199
    want = (198 * eff.framework_op_overhead_s + eff.framework_conv_op_overhead_s
            + (51 + 75) * eff.framework_container_call_s + 99 * eff.framework_module_call_s)
    assert b["host_s"] == pytest.approx(want, rel=1e-9)
    assert b["call_host_s"] == 0.0  # eager: no compiled program
    assert b["launch_bound"] is True
    assert b["device_s"] < b["host_s"]
    assert b["predicted_s"] == pytest.approx(predict_framework_row(m, prof, opts), rel=1e-12)


def test_graph_replay_row_charges_graph_floor_and_program_call(rows):
    # fw-050: ResNet-50 batch 1, compile mode=reduce-overhead, A100: 127 kernels replayed from one CUDA graph,
    # each at the graph floor, plus Dynamo's lookup, the graph tree's checks and the graph launch per call.
    m, prof, opts, b = _breakdown(rows, "fw-050")
    eff = load_device(m.device).efficiency
    assert b["kernels"] == 127
    assert b["host_s"] == pytest.approx(127 * eff.graph_launch_overhead_s, rel=1e-9)
    assert b["call_host_s"] == pytest.approx(prof.call_host_s + prof.graph_call_host_s, rel=1e-12)
    assert b["call_host_s"] == pytest.approx(176e-6 + 128e-6 + 41e-6, rel=1e-9)
    assert b["launch_bound"] is False
    # the kernels' time is at least the device's own and at least the host floors
    kernels_s = b["predicted_s"] - b["call_host_s"]
    assert kernels_s >= b["device_s"] - 1e-12
    assert b["predicted_s"] == pytest.approx(predict_framework_row(m, prof, opts), rel=1e-12)


def test_device_time_ignores_host_fields_and_grows_with_batch(rows):
    # the same compiled ResNet-50 at batch 4 (fw-052) does four times the work: its device time is larger,
    # its host floors (the same 127 replayed kernels) are not
    b1 = _breakdown(rows, "fw-050")[3]
    b4 = _breakdown(rows, "fw-052")[3]
    assert b4["kernels"] == b1["kernels"] == 127
    assert b4["host_s"] == pytest.approx(b1["host_s"], rel=1e-12)
    assert b4["device_s"] > 1.5 * b1["device_s"]


def test_default_mode_compile_is_not_charged_graph_launch(rows):
    # fw-016: ResNet-50 batch 1, compile default mode: every kernel launched from Python (no CUDA graph), so
    # the per-call host time is Dynamo's lookup alone
    m, prof, opts, b = _breakdown(rows, "fw-016")
    assert b["call_host_s"] == pytest.approx(prof.call_host_s, rel=1e-12)
    assert b["call_host_s"] == pytest.approx(176e-6, rel=1e-9)
    assert b["launch_bound"] is True

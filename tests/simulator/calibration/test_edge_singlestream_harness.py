"""What NVIDIA's MLPerf v3.1 harness times in the Jetson AGX Orin single-stream rows (edge-001, edge-003), as the
rows' notes and docs/edge.md ("Single stream: what the harness times") state it, and the arithmetic those docs draw
from the logs and the model. Nothing here prices the harness: no Orin timing of its host steps or of the NMS plugin
was found.
"""

from __future__ import annotations

import re

import pytest

from simulator.calibration.predict import quiet_engine, run_options
from simulator.calibration.validation import load_edge_rows


@pytest.fixture(scope="module")
def rows():
    return {r.id: r for r in load_edge_rows()}


def test_loadgen_gap_between_queries_is_outside_the_latency(rows):
    """LoadGen's 'QPS w/o loadgen overhead' is 1 / mean latency; 'QPS w/ loadgen overhead' adds its own gap per
    query, about 5 us, which is not part of any latency sample (edge-001's log)."""
    notes = rows["edge-001"].notes
    mean_ms = float(re.search(r"Mean (\d+\.\d+) ms", notes).group(1))
    qps_wo = float(re.search(r"'QPS w/o loadgen overhead : (\d+\.\d+)'", notes).group(1))
    qps_w = float(re.search(r"'QPS w/ loadgen overhead : (\d+\.\d+)'", notes).group(1))
    assert mean_ms == 0.636375
    assert round(1e3 / mean_ms, 2) == qps_wo == 1571.40
    gap_us = (1.0 / qps_w - 1.0 / qps_wo) * 1e6
    assert gap_us == pytest.approx(4.967, abs=0.001)  # 641.342 - 636.375 us


def test_resnet50_batch1_and_batch8_logs_run_the_same_kernels():
    """The single-stream (batch 1) and MultiStream (8 samples, GPU batch 8, CUDA graphs) logs of the same system run
    the same 56 fused kernels in the model, so a cost per kernel and a cost per query add the same constant to both;
    the model misses them with opposite signs (batch 1 too fast by 0.166 ms against the mean, batch 8 too slow by
    0.078 ms), so no such constant closes both: adding the batch-1 gap makes batch 8 more than 10 % slow."""
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload

    opts, _ = run_options({"source": "TensorRT 8.5.2", "notes": "", "metric_reported": "", "dtype": "int8"})
    assert opts.cuda_graphs and opts.fusion
    spec = load_hardware("jetson-agx-orin-64gb@60w")
    got = {}
    for batch in (1, 8):
        with quiet_engine():
            t = evaluate(load_workload("resnet50", batch=batch, seq=224, dtype="int8"), spec, opts).totals
        got[batch] = (t.latency_s * 1e3, t.kernels)
    assert got[1][1] == got[8][1] == 56
    mean_b1, mean_b8 = 0.636375, 2.164327  # ms, edge-001's log and the MultiStream log named in its notes
    gap_b1 = mean_b1 - got[1][0]
    assert gap_b1 > 0.1 and mean_b8 - got[8][0] < 0
    assert (got[8][0] + gap_b1) / mean_b8 - 1.0 > 0.10


def test_retinanet_rows_place_the_nms_plugin_by_engine(rows):
    """The GPU engine appends NMS_OPT_TRT (it runs on the GPU inside the timed single-stream query); the PVA plugin
    serves only DLA engines; the zoo graph ends at the head maps, so the prediction leaves the NMS out."""
    ss, off = rows["edge-003"].notes, rows["edge-004"].notes
    for fact in ("NMS_OPT_TRT", "never the PVA plugin", "'PVA NMS should only be used by DLA engines'",
                 "the NMS runs on the GPU inside the timed engine", "use_direct_host_access True"):
        assert fact in ss
    assert "RetinaNetNMSPVATRT on the PVA, so they are outside the GPU and DLA graphs" not in ss + off
    assert "the GPU engine takes NMS_OPT_TRT" in off and "the DLA engines the PVA plugin" in off
    from workloads.resolve import load_workload

    graph = load_workload("retinanet", batch=1, seq=800, dtype="int8")
    names = [op.name.lower() for op in graph.ops]
    assert not any("nms" in n or "topk" in n for n in names)

"""The TensorRT demoBERT rows' graph launch: each timed iteration of build/perf --enable_graph holds one
cudaGraphLaunch of the engine after the start event on the idle stream, under a CUDA driver before 12.6 (TensorRT
OSS at 007c3470 builds against CUDA 11.6 or 10.2), so its host time, 2 us + 200 ns per node
(workloads.frameworks.GRAPH_LAUNCH_FORMS), lies inside the measured interval (docs/accuracy.md, "The T4 batch-1
rows: demoBERT's graph launch, DeepLearningExamples' module calls"), and the DeepLearningExamples ResNet-50 rows'
module tree.
"""

from __future__ import annotations

import pytest

from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import (
    GraphCache,
    default_predict,
    graph_launch_host_s,
    graph_launch_stated,
    run_options,
)
from simulator.calibration.validation import DEFAULT_DATASET, known_devices

DEMOBERT = [f"pub-{i:03d}" for i in range(62, 86)]


@pytest.fixture(scope="module")
def rows():
    ms = MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())
    return {m.id: m for m in ms}


def test_every_demobert_row_states_the_pre_12_6_launch(rows):
    """All 24 T4 rows of the README table state the launch and the driver form; no other published row does."""
    for rid in DEMOBERT:
        notes = rows[rid].notes
        assert graph_launch_stated(notes) == "pre-12.6", rid
        for fact in ("cudaStreamBeginCapture", "cuda-11.6.x or cuda-10.2", "CUDA_VERSION=11.6.2", "2022-10-05"):
            assert fact in notes, (rid, fact)
    others = [rid for rid, m in rows.items() if rid not in DEMOBERT and graph_launch_stated(m.notes)]
    assert others == []


def test_graph_launch_stated_forms():
    assert graph_launch_stated("x: one cudaGraphLaunch of the engine per timed iteration, CUDA driver 12.6.") == "12.6"
    assert graph_launch_stated("one cudaGraphLaunch per iteration") == ""
    # the marker in any case; a form not in the table is one located error with a near match, never a silent 0
    assert graph_launch_stated("One cudaGraphLaunch of the engine per timed iteration, cuda driver pre-12.6") == \
        "pre-12.6"
    with pytest.raises(ValueError, match=r"^pub-070: notes: unknown CUDA driver graph-launch form; got '12\.4'; "
                                         r"expected one of pre-12\.6, 12\.6; did you mean '12\.6'\?"):
        graph_launch_stated("one cudaGraphLaunch of the engine per timed iteration, CUDA driver 12.4.",
                            "pub-070: notes")


def test_tile_loop_kernel_marker_is_checked():
    row = {"source": "x", "metric_reported": "", "dtype": "int8", "id": "pub-095"}
    name = "cub-ublkcp@b52534bf04:mul-int8"
    assert run_options({**row, "notes": f"kernel: {name} (lower-case marker)."})[0].streaming_kernel == name
    assert run_options({**row, "notes": f"Kernel: {name}."})[0].streaming_kernel == name
    for bad, near in ((name.upper(), name), ("cub-ublkcp@b52534bf04:mul-int16", name),
                      ("cub-vectorized@92bbfbd128:add-fp16", "cub-ublkcp@92bbfbd128:add-fp16")):
        with pytest.raises(ValueError, match=rf"^pub-095: notes: unknown tile-loop kernel; got '{bad}'; expected one "
                                             rf"of .*; did you mean '{near}'\?"):
            run_options({**row, "notes": f"Kernel: {bad}"})


def _report(rows, rid):
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import evaluate

    m = rows[rid]
    opts, _ = run_options({"source": m.source, "notes": m.notes, "metric_reported": m.metric_reported,
                           "dtype": m.dtype})
    graph = GraphCache().get(m)
    return m, graph, opts, evaluate(graph, load_device(m.device), opts)


@pytest.mark.parametrize(("rid", "kernels", "launch_us"), [
    # BERT-Base: 12 layers x 7 kernels (QKV, attention, output, skip-layernorm, FC1 + GELU, FC2, skip-layernorm)
    # + 3 embedding gathers, their norm and the head: 89 nodes, 2 + 0.2 x 89 = 19.8 us
    ("pub-070", 89, 19.8),
    # BERT-Large: 24 x 7 + 5 = 173 nodes, 2 + 0.2 x 173 = 36.6 us
    ("pub-082", 173, 36.6),
])
def test_launch_is_two_us_plus_200_ns_a_node(rows, rid, kernels, launch_us):
    m, _, opts, report = _report(rows, rid)
    assert opts.cuda_graphs
    assert sum(r.kernels for r in report.records) == kernels
    assert graph_launch_host_s(report, m, opts.cuda_graphs) == pytest.approx(launch_us * 1e-6, rel=1e-9)
    # notes that state a graph launch of a run not costed as a graph replay: a located error, not 0
    with pytest.raises(ValueError, match=r"published_gpu\.csv:\d+: notes: a cudaGraphLaunch per timed iteration; got "
                                         "a run costed without CUDA graphs"):
        graph_launch_host_s(report, m, False)


def test_prediction_adds_the_launch_to_the_device_time(rows):
    """pub-070: the engine's device time (0.822 ms) plus the launch (19.8 us) against the 1.69 ms measured."""
    from hwmodels.catalog import load_device

    m, graph, _, report = _report(rows, "pub-070")
    predicted = default_predict(graph, load_device(m.device), m)
    assert predicted - report.totals.latency_s == pytest.approx(19.8e-6, rel=1e-9)
    assert predicted == pytest.approx(0.8417e-3, abs=0.0005e-3)


DLE_RESNET = [f"pub-{i:03d}" for i in range(46, 62)]


def test_dle_resnet_rows_name_their_module_tree(rows):
    """The 16 DeepLearningExamples ResNet-50 rows name the model code's module tree (53 calls the op names do not
    show); the published path adds it only where the run counts module calls (eager PyTorch)."""
    from workloads.frameworks import module_tree_of

    for rid in DLE_RESNET:
        assert module_tree_of(rows[rid].notes) == "DeepLearningExamples ResNet", rid
    others = [rid for rid, m in rows.items() if rid not in DLE_RESNET and module_tree_of(m.notes)]
    assert others == []


def test_dle_resnet_module_calls_in_the_batch1_prediction(rows):
    """pub-046 (FP32, batch 1, host-bound): each of the 53 calls adds framework_container_call_s (2.2 us) to its
    op's host time, which shows wherever the op's host time exceeds its device time: 52 of them (the stem
    convolution's 58 us of device work covers its call), 114.4 us."""
    from hwmodels.catalog import load_device
    from simulator.calibration.predict import stated_module_tree

    m = rows["pub-046"]
    graph = GraphCache().get(m)
    dev = load_device(m.device)
    opts, _ = run_options({"source": m.source, "notes": m.notes, "metric_reported": m.metric_reported,
                           "dtype": m.dtype})
    assert opts.eager_modules
    assert stated_module_tree(graph, m, False) is graph
    with_tree = default_predict(graph, dev, m)
    from dataclasses import replace

    bare = default_predict(graph, dev, replace(m, notes=m.notes.replace("Module tree:", "Module calls:")))
    assert with_tree - bare == pytest.approx(52 * 2.2e-6, rel=1e-6)


def test_a_misspelt_module_tree_is_one_located_error(rows):
    """A row naming an unknown tree: one line with the notes' field, the value, the choices and a suggestion."""
    from dataclasses import replace

    from hwmodels.catalog import load_device
    from workloads.frameworks import FrameworkError

    m = rows["pub-046"]
    bad = replace(m, notes=m.notes.replace("DeepLearningExamples ResNet.", "DeepLearningExample ResNet."))
    with pytest.raises(FrameworkError) as err:
        default_predict(GraphCache().get(m), load_device(m.device), bad)
    msg = str(err.value)
    assert msg.startswith("notes: unknown module tree; got 'DeepLearningExample ResNet'")
    assert "did you mean 'DeepLearningExamples ResNet'?" in msg and "\n" not in msg

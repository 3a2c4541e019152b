"""DeepLearningExamples' image-classification training loop: the GPU work its loader adds to every step."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from simulator import EvalOptions, evaluate
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, train_loader_stated
from simulator.calibration.validation import DEFAULT_DATASET
from simulator.hardware import known_devices
from workloads.frameworks import classification_train_loader
from workloads.zoo import build_model

N, HW, CLASSES = 8, 224, 1000
IMG = N * 3 * HW * HW  # elements of the image batch


def _step(dtype: str, batch: int = N):
    from workloads.resolve import load_workload

    return load_workload("resnet50", batch=batch, seq=HW, dtype=dtype, train=True)


def test_normalisation_and_mixup_precede_the_network():
    g = _step("fp16")
    v = classification_train_loader(g)
    added = [op.name for op in v][:len(v.ops) - len(g.ops)]
    # PrefetchedWrapper: float(), sub_(mean), div_(std), the one-hot targets (zeros, scatter); mixup over the
    # images and the targets (gather, c * x, (1 - c) * x[perm], add); autocast's cast at conv1
    assert added == ["loader.float", "loader.sub_mean", "loader.div_std", "loader.one_hot_zeros",
                     "loader.one_hot_scatter",
                     "mixup.images_gather", "mixup.images_scale", "mixup.images_perm_scale", "mixup.images_add",
                     "mixup.targets_gather", "mixup.targets_scale", "mixup.targets_perm_scale", "mixup.targets_add",
                     "conv1/autocast_input"]
    assert v.meta["dle_train_loader"] is True
    # bytes by hand: the uint8 batch read (1 B) and written in fp32 (4 B); the per-channel normalisation reads
    # and writes the fp32 batch (the 3-value mean / std: 12 B); the mixup add reads two fp32 batches
    assert (v.op("loader.float").bytes_read, v.op("loader.float").bytes_written) == (IMG, 4 * IMG)
    assert (v.op("loader.sub_mean").bytes_read, v.op("loader.sub_mean").bytes_written) == (4 * IMG + 12, 4 * IMG)
    assert (v.op("mixup.images_add").bytes_read, v.op("mixup.images_add").bytes_written) == (8 * IMG, 4 * IMG)
    assert v.op("mixup.targets_add").outputs[0].shape == (N, CLASSES)
    cast = v.op("conv1/autocast_input")
    assert (cast.bytes_read, cast.bytes_written) == (4 * IMG, 2 * IMG)
    assert v.op("conv1").inputs[0] == cast.outputs[0]
    assert [op.name for op in v][len(added):] == [op.name for op in g]


def test_four_byte_steps_read_the_mixed_batch_without_a_cast():
    for dtype in ("tf32", "fp32"):
        v = classification_train_loader(_step(dtype))
        assert not any(op.name.endswith("/autocast_input") for op in v)
        x = v.op("conv1").inputs[0]
        assert x == v.op("mixup.images_add").outputs[0] and x.dtype.value == dtype


def test_on_an_a100_the_added_time_is_the_streamed_bytes():
    a100 = load_device("a100-sxm4-80gb")
    opts = EvalOptions()
    g = _step("fp16", batch=256)  # pub-059's batch: the fp32 batch, 154 MB, passes the 40 MiB L2
    plain, step = evaluate(g, a100, opts), evaluate(classification_train_loader(g), a100, opts)
    # bytes an element of the image batch: float 1 + 4, sub / div / gather / scale / scale 4 + 4 each, add 8 + 4,
    # cast 4 + 2: 63 B, streamed at the Ampere figure (0.873 of 2039 GB/s); the 5 target kernels (1 MB each)
    # at the launch floor. By hand: 63 x 38.5M / 1780 GB/s = 1.364 ms, + 25 us = 1.389 ms; the engine adds each
    # kernel's fixed device time and the 12-byte mean / std reads (1.411 ms)
    img = 256 * 3 * HW * HW
    by_hand = 63 * img / (2039e9 * a100.efficiency.dram_bandwidth_fraction) + 5 * a100.efficiency.launch_overhead_s
    assert step.latency_s - plain.latency_s == pytest.approx(by_hand, rel=0.02)


def test_refuses_a_second_application_and_inference_graphs():
    g = _step("fp32")
    with pytest.raises(ValueError, match="its ops are already added"):
        classification_train_loader(classification_train_loader(g))
    with pytest.raises(ValueError, match="got an inference graph; expected a training step"):
        classification_train_loader(build_model("resnet18", batch=2, dtype="fp32"))
    with pytest.raises(ValueError, match="no 4-d activation input 'pixels'"):
        classification_train_loader(g, image="pixels")


def test_published_training_rows_say_their_loader():
    ms = MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())
    marked = sorted(m.id for m in ms if train_loader_stated(m.notes))
    assert marked == ["pub-058", "pub-059", "pub-060", "pub-061"]  # DeepLearningExamples ResNet-50 training
    row = next(m for m in ms if m.id == "pub-059")
    v = GraphCache().get(row)
    assert v.meta.get("dle_train_loader") is True and v.op("conv1").inputs[0].name == "conv1/autocast_input"

"""RetinaNet (MLPerf Inference object detection) against hand counts and two published implementations.

No parameter count or FLOP figure is published for MLPerf's ResNeXt-50 RetinaNet itself, so the
structure is pinned three ways: (1) the MLPerf model's parameters counted by hand from the layer
formulas, with the trunk tied to torchvision's published ResNeXt-50 32x4d count; (2) the same builder
with a ResNet-50 trunk and 91 classes equals torchvision's ``retinanet_resnet50_fpn`` exactly
(num_params 34,014,999 and 151.54 GFLOPS, which torchvision counts as multiply-accumulates);
(3) with a ResNet-50 v1 trunk (stride on the 1x1 conv), P6 from C5 and 80 classes it equals
Detectron2's ``retinanet_R_50_FPN`` (parameter_count 37,915,572; 146 G conv "flops", fvcore's
multiply-accumulates, at 800x800, truncated to an integer). Frozen batch-norm vectors are buffers in
those implementations, so they are subtracted before comparing.
"""

from __future__ import annotations

import pytest

from workloads.zoo import build_model, get_entry
from workloads.zoo.retinanet import frozen_bn_params

TV_RESNEXT50 = 25_028_904  # torchvision ResNeXt50_32X4D_Weights.IMAGENET1K_V1 num_params (fc + BN included)
TV_RETINANET = (34_014_999, 151.54)  # torchvision RetinaNet_ResNet50_FPN_Weights.COCO_V1: num_params, _ops (GFLOPS)
D2_RETINANET = (37_915_572, 146)  # detectron2 tests/test_model_analysis.py RetinaNetTest: parameter_count, int(conv flops)


@pytest.fixture(scope="module")
def mlperf():
    return build_model("retinanet")


def _conv(cin: int, cout: int, k: int, groups: int = 1, bias: bool = False) -> int:
    return cout * (cin // groups) * k * k + (cout if bias else 0)


def _resnext_trunk_params(groups: int, wpg: int) -> int:
    """Conv + batch-norm parameters of a torchvision ResNet/ResNeXt-50 without its fc layer, by formula."""
    n = _conv(3, 64, 7) + 2 * 64
    cin = 64
    for stage, blocks in enumerate((3, 4, 6, 3)):
        planes = 64 * 2**stage
        width, out = planes * wpg // 64 * groups, planes * 4
        for i in range(blocks):
            n += _conv(cin, width, 1) + _conv(width, width, 3, groups) + _conv(width, out, 1)
            n += 2 * (width + width + out)
            if i == 0:
                n += _conv(cin, out, 1) + 2 * out
            cin = out
    return n


def _fpn_and_heads(classes: int, c5_p6: bool) -> int:
    fpn = sum(_conv(c, 256, 1, bias=True) for c in (512, 1024, 2048)) + 3 * _conv(256, 256, 3, bias=True)
    fpn += _conv(2048 if c5_p6 else 256, 256, 3, bias=True) + _conv(256, 256, 3, bias=True)
    tower = 4 * _conv(256, 256, 3, bias=True)
    return fpn + tower + _conv(256, 9 * classes, 3, bias=True) + tower + _conv(256, 9 * 4, 3, bias=True)


def test_trunk_is_torchvision_resnext50_without_fc(mlperf):
    assert _resnext_trunk_params(32, 4) == TV_RESNEXT50 - (2048 * 1000 + 1000)
    trunk = sum(op.params for op in mlperf if op.group.startswith("backbone.body"))
    assert trunk == TV_RESNEXT50 - (2048 * 1000 + 1000) == 22_979_904


def test_mlperf_parameters_by_hand(mlperf):
    assert mlperf.params == _resnext_trunk_params(32, 4) + _fpn_and_heads(264, c5_p6=False) == 37_128_876
    # the heads are shared by the five levels: their weights are counted once
    assert sum(1 for op in mlperf if op.kind == "conv2d" and op.group.startswith("head.")) == 5 * 2 * 5


def test_mlperf_shapes_and_head_macs(mlperf):
    shapes = [t.shape for t in mlperf.outputs]
    sides = (100, 50, 25, 13, 7)  # P3-P7 at 800x800: strides 8..128, stride-2 3x3 convs round up
    assert shapes == [s for side in sides for s in ((1, 9 * 264, side, side), (1, 36, side, side))]
    cls_out = mlperf.op("head.p3.cls.out")
    assert cls_out.macs == 100 * 100 * 2376 * 256 * 9
    assert mlperf.macs == pytest.approx(201.208e9, rel=1e-5)  # the MLPerf model at 800x800 (no published figure)


def test_torchvision_resnet50_variant_equals_published():
    g = build_model("retinanet", classes=91, groups=1, width_per_group=64)
    assert g.params - frozen_bn_params(g) == TV_RETINANET[0]
    assert g.params - frozen_bn_params(g) == _resnext_trunk_params(1, 64) - frozen_bn_params(
        build_model("resnet50")) + _fpn_and_heads(91, c5_p6=False)
    assert round(g.macs / 1e9, 2) == TV_RETINANET[1]


def test_detectron2_variant_equals_published():
    g = build_model("retinanet", classes=80, groups=1, width_per_group=64, p6_from="c5", stride_in_1x1=True)
    assert g.params - frozen_bn_params(g) == D2_RETINANET[0]
    assert int(g.macs / 1e9) == D2_RETINANET[1]


def test_entry_defaults_and_batch_scaling(mlperf):
    e = get_entry("retinanet")
    assert e.defaults["seq"] == 800 and e.phases == ("forward",)
    assert get_entry("retinanet_resnext50_32x4d_fpn") is e
    g4 = build_model("retinanet", batch=4)
    assert g4.macs == 4 * mlperf.macs and g4.params == mlperf.params


@pytest.mark.parametrize(("kw", "needle"), [
    ({"seq": 810}, "image side (seq) must be a multiple of 32 (the input is padded to one); got 810; expected e.g. 800"),
    ({"p6_from": "c4"}, "p6_from must be 'p5' or 'c5'; got 'c4'"),
    ({"classes": 0}, "classes must be a positive integer; got 0"),
    ({"phase": "train"}, "phase 'train' not supported; expected one of forward"),
])
def test_bad_arguments_are_named(kw, needle):
    with pytest.raises(ValueError, match="model 'retinanet': " + needle.replace("(", r"\(").replace(")", r"\)")):
        build_model("retinanet", **kw)

"""The zoo's CNNs against published parameter counts and MAC figures, plus shape and scaling checks.

MAC convention: ``OpGraph.macs`` counts contraction multiply-accumulates (convolutions and fully
connected layers here). torchvision's model cards list "GFLOPS" that are this same quantity (one per
multiply-accumulate of conv/linear layers; e.g. ResNet-50 4.09), and the MobileNetV2 and
EfficientNet papers count multiply-adds, so ``macs`` is compared with them directly.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from workloads.ir import OpGraph
from workloads.zoo import build_model, get_entry

TV = "https://pytorch.org/vision/stable/models/generated/torchvision.models"

# model, published parameters, published GMACs (string: its printed precision matters), source
PUBLISHED = [
    ("resnet18", 11_689_512, "1.81", f"{TV}.resnet18.html (ResNet18_Weights.IMAGENET1K_V1: num_params, GFLOPS)"),
    ("resnet50", 25_557_032, "4.09", f"{TV}.resnet50.html (ResNet50_Weights.IMAGENET1K_V1: num_params, GFLOPS)"),
    ("resnet101", 44_549_160, "7.80", f"{TV}.resnet101.html (ResNet101_Weights.IMAGENET1K_V1: num_params, GFLOPS)"),
    ("resnet152", 60_192_808, "11.51", f"{TV}.resnet152.html (ResNet152_Weights.IMAGENET1K_V1: num_params, GFLOPS)"),
    ("vgg16", 138_357_544, "15.47", f"{TV}.vgg16.html (VGG16_Weights.IMAGENET1K_V1: num_params, GFLOPS)"),
    ("mobilenet_v2", 3_504_872, "0.30", f"{TV}.mobilenet_v2.html (num_params, GFLOPS); Sandler et al. 2018 Table 4: 300M MAdds"),
    ("efficientnet_b0", 5_288_548, "0.39", f"{TV}.efficientnet_b0.html (num_params, GFLOPS); Tan & Le 2019 Table 2: 0.39B FLOPs"),
    # torchvision's Inception3 computes AuxLogits in training mode only; its GFLOPS (at 299x299) is the
    # inference pass, its num_params (27,161,264) includes the auxiliary head: see test_inception_aux.
    ("inception_v3", 23_834_568, "5.71", f"{TV}.inception_v3.html (GFLOPS; num_params 27,161,264 includes AuxLogits)"),
]


def _tolerance(published: str) -> float:
    """1% of the figure, or half a unit of its last printed digit when that is wider (e.g. 0.39 -> 0.005)."""
    d = Decimal(published)
    half_unit = float(Decimal(1).scaleb(d.as_tuple().exponent)) / 2
    return max(0.01 * float(d), half_unit)


@pytest.fixture(scope="module")
def graphs() -> dict[str, OpGraph]:
    return {m: build_model(m) for m, *_ in PUBLISHED}


@pytest.mark.parametrize("model,params,gmacs,source", PUBLISHED, ids=[r[0] for r in PUBLISHED])
def test_params_equal_published(graphs: dict[str, OpGraph], model: str, params: int, gmacs: str, source: str) -> None:
    assert graphs[model].params == params, source


@pytest.mark.parametrize("model,params,gmacs,source", PUBLISHED, ids=[r[0] for r in PUBLISHED])
def test_macs_match_published(graphs: dict[str, OpGraph], model: str, params: int, gmacs: str, source: str) -> None:
    got = graphs[model].macs / 1e9
    assert abs(got - float(gmacs)) <= _tolerance(gmacs), f"{model}: {got:.4f} GMACs vs {gmacs} ({source})"


def test_tolerance_rule() -> None:
    assert _tolerance("4.09") == pytest.approx(0.0409)
    assert _tolerance("0.39") == pytest.approx(0.005)
    assert _tolerance("0.30") == pytest.approx(0.005)


def test_default_image_sizes() -> None:
    assert get_entry("inception_v3").defaults["seq"] == 299
    assert get_entry("resnet50").defaults["seq"] == 224
    assert build_model("inception_v3").op("Conv2d_1a_3x3.conv").inputs[0].shape == (1, 3, 299, 299)


def test_inception_aux() -> None:
    # AuxLogits: conv0 768->128 1x1 + BN (98,304 + 256), conv1 128->768 5x5 + BN (2,457,600 + 1,536),
    # fc 768->1000 (769,000): 3,326,696 more parameters, 27,161,264 in all as on the torchvision card.
    assert 27_161_264 - 23_834_568 == 98_304 + 256 + 2_457_600 + 1_536 + 769_000
    assert build_model("inception_v3", aux_logits=True).params == 27_161_264
    g = build_model("inception_v3", phase="train", batch=2)
    assert g.params == 27_161_264
    losses = [op for op in g if op.kind == "cross_entropy"]
    assert len(losses) == 2
    assert [t.shape for t in g.outputs] == [(1,)]  # the weighted sum of both losses is the only output


def test_resnet50_shapes() -> None:
    g = build_model("resnet50", batch=3)
    assert g.op("avgpool").inputs[0].shape == (3, 2048, 7, 7)
    assert [t.shape for t in g.outputs] == [(3, 1000)]
    assert g.op("maxpool").outputs[0].shape == (3, 64, 56, 56)
    # v1.5: the stride-2 conv of a downsampling bottleneck is the 3x3 (conv2), not the 1x1 (conv1)
    assert g.op("layer2.0.conv2").attrs["stride"] == (2, 2)
    assert g.op("layer2.0.conv1").attrs["stride"] == (1, 1)


def test_resnet18_stem_macs_by_hand() -> None:
    # conv1: 64 filters of 3x7x7 at 112x112 outputs
    assert build_model("resnet18").op("conv1").macs == 112 * 112 * 64 * 3 * 7 * 7 == 118_013_952


def test_vgg16_classifier_by_hand() -> None:
    g = build_model("vgg16")
    fc = [op for op in g if op.group == "classifier" and op.kind == "matmul"]
    assert [op.params for op in fc] == [25088 * 4096 + 4096, 4096 * 4096 + 4096, 4096 * 1000 + 1000]


@pytest.mark.parametrize("model", ["resnet50", "mobilenet_v2", "inception_v3"])
def test_batch_scaling(model: str) -> None:
    one, four = build_model(model, batch=1), build_model(model, batch=4)
    assert four.flops == 4 * one.flops
    assert four.macs == 4 * one.macs
    assert four.params == one.params


def test_image_size_scaling_resnet50() -> None:
    # every conv output side doubles exactly from 224 to 448; the fc layer (2048 x 1000) does not grow
    fc = 2048 * 1000
    small, large = build_model("resnet50", seq=224), build_model("resnet50", seq=448)
    assert large.macs - fc == 4 * (small.macs - fc)


@pytest.mark.parametrize("model", [m for m, *_ in PUBLISHED])
def test_graph_revalidates(graphs: dict[str, OpGraph], model: str) -> None:
    g = graphs[model]
    again = OpGraph(g.name, list(g.ops), g.meta)  # shapes re-inferred, DAG and names re-checked
    assert again.params == g.params and again.flops == g.flops and len(again) == len(g)
    assert len({op.name for op in g}) == len(g)


def test_train_phase() -> None:
    fwd, train = build_model("vgg16"), build_model("vgg16", phase="train", batch=2)
    assert not any(op.attrs.get("op") == "dropout" for op in fwd)
    assert sum(op.attrs.get("op") == "dropout" for op in train) == 2
    assert [t.shape for t in train.outputs] == [(1,)]
    labels = train.op("loss").inputs[1]
    assert labels.shape == (2,) and labels.dtype.value == "int64"
    bn = [op for op in build_model("resnet18", phase="train") if op.kind == "batchnorm"]
    assert bn and all(op.attrs["training"] for op in bn)


def test_dtype() -> None:
    g = build_model("mobilenet_v2", dtype="bf16")
    assert g.weight_bytes == 2 * 3_504_872


def test_unknown_phase_is_rejected() -> None:
    with pytest.raises(ValueError, match="phase 'decode' not supported"):
        build_model("resnet18", phase="decode")

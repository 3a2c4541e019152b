"""Zoo builder for RetinaNet as MLPerf Inference runs it: ResNeXt-50 32x4d + FPN (P3-P7) + shared heads, 800x800.

The network (Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017) is built in the layout of
the MLPerf reference model (``mlcommons/training`` ``single_stage_detector/ssd/model/retinanet.py``,
a copy of torchvision's RetinaNet): a ResNeXt-50 32x4d trunk (convolutions without bias + batch-norm,
stride on the 3x3 conv), a feature pyramid on layer2-layer4 (1x1 lateral and 3x3 output convs with
bias, nearest 2x top-down upsampling), P6 as a stride-2 3x3 conv on P5 and P7 on ReLU(P6), then a
classification and a box-regression subnet (four 3x3 conv + ReLU layers of 256 channels and a final
3x3 conv) whose weights are shared by the five levels. Hyperparameters come from
``data/retinanet.toml``.

Post-processing is not part of the graph. The graph ends, as NVIDIA's MLPerf TensorRT engine does
(``create_model_onnx.py`` in ``mlcommons/inference_results_v3.1``), at the ten per-level head maps
``(N, A*K, H, W)`` and ``(N, A*4, H, W)``; anchor decoding, top-k and NMS run in a TensorRT plugin
(``NMS_OPT_TRT``; on Jetson Orin ``RetinaNetNMSPVATRT`` runs it on the PVA, not the GPU), so their
cost is outside a GPU prediction.

The batch-norm layers are frozen in the reference model (torchvision's ``FrozenBatchNorm2d``: their
vectors are buffers, not parameters) and are folded into the convolutions by TensorRT; the graph
keeps them as ``batchnorm`` ops carrying their scale and shift, as the zoo's ResNets do, so
``OpGraph.params`` counts those vectors too (:func:`frozen_bn_params` gives their number).

The image side (``seq``) must be a multiple of 32: torchvision's transform pads the input to one, and
the top-down pathway doubles each level exactly.

Example
-------
>>> from workloads.zoo import build_model
>>> g = build_model("retinanet")
>>> [t.shape for t in g.outputs][:2]
[(1, 2376, 100, 100), (1, 36, 100, 100)]
"""

from __future__ import annotations

from typing import Any

from workloads.ir import OpGraph, TensorSpec
from workloads.zoo import ModelEntry, load_data, register_model
from workloads.zoo._blocks import Net

__all__ = ["build_retinanet", "frozen_bn_params", "ARCH_KEYS"]

_DATA = "retinanet.toml"
#: Hyperparameters a caller may override (``build_model("retinanet", classes=91, groups=1, ...)``),
#: e.g. to build torchvision's retinanet_resnet50_fpn (groups 1, width_per_group 64, 91 classes).
ARCH_KEYS = ("classes", "groups", "width_per_group", "layers", "p6_from", "anchors", "head_convs",
             "fpn_channels", "stride_in_1x1")


def _config(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(load_data(_DATA)[name])
    for k, v in overrides.items():
        if k in ARCH_KEYS and v is not None:
            cfg[k] = v
    if cfg["p6_from"] not in ("p5", "c5"):
        raise ValueError(f"model {name!r}: p6_from must be 'p5' or 'c5'; got {cfg['p6_from']!r}")
    for k in ("classes", "groups", "width_per_group", "anchors", "head_convs", "fpn_channels"):
        if not isinstance(cfg[k], int) or isinstance(cfg[k], bool) or cfg[k] < 1:
            raise ValueError(f"model {name!r}: {k} must be a positive integer; got {cfg[k]!r}")
    return cfg


def _bottleneck(net: Net, x: TensorSpec, planes: int, stride: int, cfg: dict[str, Any]) -> TensorSpec:
    """ResNeXt bottleneck: 1x1 -> grouped 3x3 -> 1x1 (x4), each with batch-norm; projection shortcut."""
    width = (planes * int(cfg["width_per_group"]) // 64) * int(cfg["groups"])
    out = planes * 4
    s1, s3 = (stride, 1) if cfg["stride_in_1x1"] else (1, stride)
    y = net.act(net.batchnorm(net.conv(x, width, 1, stride=s1, name="conv1"), "bn1"), "relu")
    y = net.conv(y, width, 3, stride=s3, padding=1, groups=int(cfg["groups"]), name="conv2")
    y = net.act(net.batchnorm(y, "bn2"), "relu")
    y = net.batchnorm(net.conv(y, out, 1, name="conv3"), "bn3")
    short = x
    if stride != 1 or x.shape[1] != out:
        short = net.batchnorm(net.conv(x, out, 1, stride=stride, name="downsample.0"), "downsample.1")
    return net.act(net.add(y, short), "relu")


def _trunk(net: Net, x: TensorSpec, cfg: dict[str, Any]) -> list[TensorSpec]:
    """The backbone body; returns C3, C4, C5 (the outputs of layer2, layer3, layer4)."""
    with net.group("backbone.body"):
        x = net.conv(x, 64, 7, stride=2, padding=3, name="conv1")
        x = net.act(net.batchnorm(x, "bn1"), "relu")
        x = net.pool(x, "max", 3, stride=2, padding=1, name="maxpool")
        feats = []
        for stage, n in enumerate(cfg["layers"]):
            planes = 64 * 2**stage
            for i in range(int(n)):
                with net.group(f"layer{stage + 1}.{i}"):
                    x = _bottleneck(net, x, planes, 2 if (i == 0 and stage > 0) else 1, cfg)
            feats.append(x)
    return feats[1:]


def _fpn(net: Net, cs: list[TensorSpec], cfg: dict[str, Any]) -> list[TensorSpec]:
    """Feature pyramid: P3-P5 from C3-C5 (lateral 1x1, top-down nearest 2x, output 3x3), then P6, P7."""
    ch = int(cfg["fpn_channels"])
    with net.group("backbone.fpn"):
        last = net.conv(cs[-1], ch, 1, bias=True, name=f"inner_blocks.{len(cs) - 1}")
        ps = [net.conv(last, ch, 3, padding=1, bias=True, name=f"layer_blocks.{len(cs) - 1}")]
        for idx in range(len(cs) - 2, -1, -1):
            lateral = net.conv(cs[idx], ch, 1, bias=True, name=f"inner_blocks.{idx}")
            up = net.b.op("resize", [last], name=f"top_down.{idx}", scale=2)
            last = net.add(lateral, up, name=f"merge.{idx}")
            ps.insert(0, net.conv(last, ch, 3, padding=1, bias=True, name=f"layer_blocks.{idx}"))
        src = ps[-1] if cfg["p6_from"] == "p5" else cs[-1]
        p6 = net.conv(src, ch, 3, stride=2, padding=1, bias=True, name="extra_blocks.p6")
        p7 = net.conv(net.act(p6, "relu", name="extra_blocks.relu"), ch, 3, stride=2, padding=1, bias=True,
                      name="extra_blocks.p7")
    return [*ps, p6, p7]


def _head_weights(net: Net, prefix: str, ch: int, n_convs: int, out: int, final: str) -> list[TensorSpec]:
    """Weights of one subnet, created once and shared by every pyramid level."""
    ws = []
    for i in range(n_convs):
        ws += [net.weight(f"{prefix}.conv.{2 * i}.weight", (ch, ch, 3, 3)), net.weight(f"{prefix}.conv.{2 * i}.bias", (ch,))]
    ws += [net.weight(f"{prefix}.{final}.weight", (out, ch, 3, 3)), net.weight(f"{prefix}.{final}.bias", (out,))]
    return ws


def _apply_head(net: Net, x: TensorSpec, ws: list[TensorSpec], tag: str) -> TensorSpec:
    for i in range(0, len(ws) - 2, 2):
        x = net.b.op("conv2d", [x, ws[i], ws[i + 1]], name=f"{tag}.conv{i // 2}", stride=(1, 1), padding=(1, 1))
        x = net.act(x, "relu", name=f"{tag}.relu{i // 2}")
    return net.b.op("conv2d", [x, ws[-2], ws[-1]], name=f"{tag}.out", stride=(1, 1), padding=(1, 1))


def build_retinanet(name: str, *, batch: int, seq: int, phase: str, dtype: str, **extra: Any) -> OpGraph:
    """RetinaNet forward pass up to the per-level class and box maps (post-processing runs in a plugin).

    ``seq`` is the square image side (multiple of 32). Keys of :data:`ARCH_KEYS` in ``extra`` override the
    data file (the tests build torchvision's and Detectron2's ResNet-50 variants this way).
    """
    if seq % 32:
        raise ValueError(f"model {name!r}: image side (seq) must be a multiple of 32 (the input is padded to one); "
                         f"got {seq}; expected e.g. {max(32, 32 * round(seq / 32))}")
    cfg = _config(name, extra)
    net = Net(name, dtype=dtype, phase=phase)
    x = net.input("image", (batch, 3, seq, seq))
    levels = _fpn(net, _trunk(net, x, cfg), cfg)
    ch, a, k = int(cfg["fpn_channels"]), int(cfg["anchors"]), int(cfg["classes"])
    with net.group("head"):
        cls_w = _head_weights(net, "classification_head", ch, int(cfg["head_convs"]), a * k, "cls_logits")
        box_w = _head_weights(net, "regression_head", ch, int(cfg["head_convs"]), a * 4, "bbox_reg")
        for lvl, feat in enumerate(levels, start=3):
            with net.group(f"p{lvl}"):
                _apply_head(net, feat, cls_w, "cls")
                _apply_head(net, feat, box_w, "box")
    return net.build(model=name, batch=batch, image_size=seq, classes=k, anchors=a,
                     postprocess="anchor decoding, top-k and NMS in a TensorRT plugin: not in the graph")


def frozen_bn_params(graph: OpGraph) -> int:
    """Elements of the batch-norm scale and shift vectors in ``graph`` (buffers in the frozen reference model)."""
    return sum(op.params for op in graph if op.kind == "batchnorm")


def _register() -> None:
    cfg = load_data(_DATA)["retinanet"]
    register_model(ModelEntry(
        name="retinanet", family="detection", description=cfg["description"], source=cfg["source"],
        builder=build_retinanet,
        defaults={"batch": 1, "seq": int(cfg["image_size"]), "dtype": "fp32", "phase": "forward"},
        phases=("forward",), aliases=("retinanet-resnext50", "retinanet_resnext50_32x4d_fpn"),
    ))


_register()

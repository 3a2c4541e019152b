"""Zoo builders for convolutional image classifiers: ResNet, VGG-16, MobileNetV2, EfficientNet-B0, Inception-v3.

Layouts follow torchvision's definitions (convolutions without bias followed by batch-norm, ResNet
v1.5 with the stride on the 3x3 conv, classifier weights included), so parameter counts match the
torchvision model cards exactly. Hyperparameters come from ``data/cnn.toml``.

Every builder takes ``(name, *, batch, seq, phase, context, dtype, **extra)`` where ``seq`` is the
input image side in pixels; ``phase="train"`` adds dropout where the network has it, batch-norm in
training mode and a cross-entropy loss against int64 labels.

Example
-------
>>> from workloads.zoo import build_model
>>> g = build_model("resnet50")
>>> g.params, g.outputs[0].shape
(25557032, (1, 1000))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workloads.ir import GraphError, OpGraph, TensorSpec
from workloads.zoo import ModelEntry, load_data, register_model
from workloads.zoo._blocks import Net

__all__ = ["build_resnet", "build_vgg", "build_mobilenet_v2", "build_efficientnet", "build_inception_v3"]

_DATA = "cnn.toml"


def _cfg(name: str) -> dict[str, Any]:
    return load_data(_DATA)[name.replace("-", "_")]


def _image(net: Net, batch: int, side: int) -> TensorSpec:
    return net.input("image", (batch, 3, side, side))


def _head(net: Net, feats: TensorSpec, classes: int, *, dropout: bool) -> TensorSpec:
    """Global average pool, optional dropout, fully connected classifier."""
    x = net.global_avgpool(feats)
    if dropout:
        x = net.dropout(x)
    return net.linear(x, classes, name="fc" if not dropout else "classifier")


def _finish(net: Net, logits: TensorSpec, **meta: Any) -> OpGraph:
    if net.train:
        net.classification_loss(logits)
    return net.build(**meta)


def _conv_bn(net: Net, x: TensorSpec, out: int, k: int | tuple[int, int], *, stride: int = 1,
             padding: int | tuple[int, int] = 0, groups: int = 1, act: str | None = "relu",
             name: str = "") -> TensorSpec:
    """conv (no bias) -> batch-norm -> activation, weights under ``name`` (``<name>.conv``/``.bn``)."""
    pre = f"{name}." if name else ""
    y = net.conv(x, out, k, stride=stride, padding=padding, groups=groups, name=f"{pre}conv")
    y = net.batchnorm(y, name=f"{pre}bn")
    return net.act(y, act, name=f"{pre}{act}") if act else y


# ------------------------------------------------------------------------------------------------
# ResNet (torchvision v1.5)


def _basic_block(net: Net, x: TensorSpec, planes: int, stride: int) -> TensorSpec:
    y = net.conv(x, planes, 3, stride=stride, padding=1, name="conv1")
    y = net.act(net.batchnorm(y, "bn1"), "relu")
    y = net.conv(y, planes, 3, padding=1, name="conv2")
    y = net.batchnorm(y, "bn2")
    short = x
    if stride != 1 or x.shape[1] != planes:
        short = net.batchnorm(net.conv(x, planes, 1, stride=stride, name="downsample.0"), "downsample.1")
    return net.act(net.add(y, short), "relu")


def _bottleneck(net: Net, x: TensorSpec, planes: int, stride: int) -> TensorSpec:
    out = planes * 4
    y = net.act(net.batchnorm(net.conv(x, planes, 1, name="conv1"), "bn1"), "relu")
    y = net.act(net.batchnorm(net.conv(y, planes, 3, stride=stride, padding=1, name="conv2"), "bn2"), "relu")
    y = net.batchnorm(net.conv(y, out, 1, name="conv3"), "bn3")
    short = x
    if stride != 1 or x.shape[1] != out:
        short = net.batchnorm(net.conv(x, out, 1, stride=stride, name="downsample.0"), "downsample.1")
    return net.act(net.add(y, short), "relu")


def build_resnet(name: str, *, batch: int, seq: int, phase: str, dtype: str, **_: Any) -> OpGraph:
    """ResNet-18/50/101/152 as in torchvision (v1.5 bottleneck: stride on the 3x3 conv)."""
    cfg = _cfg(name)
    net = Net(name, dtype=dtype, phase=phase)
    x = _image(net, batch, seq)
    width = int(cfg["width"])
    x = net.conv(x, width, 7, stride=2, padding=3, name="conv1")
    x = net.act(net.batchnorm(x, "bn1"), "relu")
    x = net.pool(x, "max", 3, stride=2, padding=1, name="maxpool")
    block = _bottleneck if cfg["block"] == "bottleneck" else _basic_block
    for stage, n in enumerate(cfg["layers"]):
        planes = width * 2**stage
        for i in range(n):
            with net.group(f"layer{stage + 1}.{i}"):
                x = block(net, x, planes, 2 if (i == 0 and stage > 0) else 1)
    logits = _head(net, x, int(cfg["classes"]), dropout=False)
    return _finish(net, logits, model=name, batch=batch, image_size=seq)


# ------------------------------------------------------------------------------------------------
# VGG


def build_vgg(name: str, *, batch: int, seq: int, phase: str, dtype: str, **_: Any) -> OpGraph:
    """VGG-16 configuration D: 13 biased 3x3 convs with ReLU, 5 max pools, 3 FC layers."""
    cfg = _cfg(name)
    net = Net(name, dtype=dtype, phase=phase)
    x = _image(net, batch, seq)
    with net.group("features"):
        for i, c in enumerate(cfg["features"]):
            if c == 0:
                x = net.pool(x, "max", 2, name=f"pool{i}")
            else:
                x = net.act(net.conv(x, int(c), 3, padding=1, bias=True, name=str(i)), "relu")
    p = int(cfg["pool_output"])
    x = net.b.op("pool2d", [x], name="avgpool", mode="avg", output_size=p)
    x = net.reshape(x, (batch, x.shape[1] * p * p), name="flatten")
    hidden = int(cfg["hidden"])
    with net.group("classifier"):
        x = net.dropout(net.act(net.linear(x, hidden, name="0"), "relu"), "2")
        x = net.dropout(net.act(net.linear(x, hidden, name="3"), "relu"), "5")
        logits = net.linear(x, int(cfg["classes"]), name="6")
    return _finish(net, logits, model=name, batch=batch, image_size=seq)


# ------------------------------------------------------------------------------------------------
# MobileNetV2


def _inverted_residual(net: Net, x: TensorSpec, out: int, stride: int, t: int) -> TensorSpec:
    inp = x.shape[1]
    hidden = inp * t
    y = x
    if t != 1:
        y = _conv_bn(net, y, hidden, 1, act="relu6", name="expand")
    y = _conv_bn(net, y, hidden, 3, stride=stride, padding=1, groups=hidden, act="relu6", name="dw")
    y = _conv_bn(net, y, out, 1, act=None, name="project")
    return net.add(x, y) if stride == 1 and inp == out else y


def build_mobilenet_v2(name: str, *, batch: int, seq: int, phase: str, dtype: str, **_: Any) -> OpGraph:
    """MobileNetV2 1.0 (Table 2 of the paper) with torchvision's classifier (dropout 0.2 + FC)."""
    cfg = _cfg(name)
    net = Net(name, dtype=dtype, phase=phase)
    x = _image(net, batch, seq)
    with net.group("features.0"):
        x = _conv_bn(net, x, int(cfg["stem"]), 3, stride=2, padding=1, act="relu6")
    idx = 1
    for t, c, n, s in cfg["blocks"]:
        for i in range(n):
            with net.group(f"features.{idx}"):
                x = _inverted_residual(net, x, int(c), int(s) if i == 0 else 1, int(t))
            idx += 1
    with net.group(f"features.{idx}"):
        x = _conv_bn(net, x, int(cfg["last_channel"]), 1, act="relu6")
    logits = _head(net, x, int(cfg["classes"]), dropout=True)
    return _finish(net, logits, model=name, batch=batch, image_size=seq)


# ------------------------------------------------------------------------------------------------
# EfficientNet-B0


def _mbconv(net: Net, x: TensorSpec, out: int, k: int, stride: int, t: int, se_ratio: float) -> TensorSpec:
    inp = x.shape[1]
    hidden = inp * t
    y = x
    if t != 1:
        y = _conv_bn(net, y, hidden, 1, act="silu", name="expand")
    y = _conv_bn(net, y, hidden, k, stride=stride, padding=k // 2, groups=hidden, act="silu", name="dw")
    with net.group("se"):  # squeeze (global pool) -> fc1 -> SiLU -> fc2 -> sigmoid -> channel scale
        squeeze = max(1, int(inp * se_ratio))
        s = net.b.op("pool2d", [y], name="avgpool", mode="avg", output_size=1)
        s = net.act(net.conv(s, squeeze, 1, bias=True, name="fc1"), "silu")
        s = net.act(net.conv(s, hidden, 1, bias=True, name="fc2"), "sigmoid")
        y = net.binary("mul", y, s, name="scale")
    y = _conv_bn(net, y, out, 1, act=None, name="project")
    return net.add(x, y) if stride == 1 and inp == out else y


def build_efficientnet(name: str, *, batch: int, seq: int, phase: str, dtype: str, **_: Any) -> OpGraph:
    """EfficientNet-B0 (Table 1 of the paper): MBConv with squeeze-excitation, SiLU, dropout + FC head.

    Stochastic depth (training only) is not represented: it scales whole residual branches and adds
    no contraction work.
    """
    cfg = _cfg(name)
    net = Net(name, dtype=dtype, phase=phase)
    x = _image(net, batch, seq)
    with net.group("features.0"):
        x = _conv_bn(net, x, int(cfg["stem"]), 3, stride=2, padding=1, act="silu")
    se = float(cfg["se_ratio"])
    for stage, (t, k, s, c, n) in enumerate(cfg["blocks"]):
        for i in range(n):
            with net.group(f"features.{stage + 1}.{i}"):
                x = _mbconv(net, x, int(c), int(k), int(s) if i == 0 else 1, int(t), se)
    with net.group(f"features.{len(cfg['blocks']) + 1}"):
        x = _conv_bn(net, x, int(cfg["last_channel"]), 1, act="silu")
    logits = _head(net, x, int(cfg["classes"]), dropout=True)
    return _finish(net, logits, model=name, batch=batch, image_size=seq)


# ------------------------------------------------------------------------------------------------
# Inception-v3 (torchvision layout: BasicConv2d = conv without bias + batch-norm + ReLU)


def _bc(net: Net, x: TensorSpec, out: int, k: int | tuple[int, int], name: str, *, stride: int = 1,
        padding: int | tuple[int, int] = 0) -> TensorSpec:
    return _conv_bn(net, x, out, k, stride=stride, padding=padding, name=name)


def _avgpool3(net: Net, x: TensorSpec) -> TensorSpec:
    return net.pool(x, "avg", 3, stride=1, padding=1, name="branch_pool.avgpool")


def _inception_a(net: Net, x: TensorSpec, pool_features: int) -> TensorSpec:
    b1 = _bc(net, x, 64, 1, "branch1x1")
    b5 = _bc(net, _bc(net, x, 48, 1, "branch5x5_1"), 64, 5, "branch5x5_2", padding=2)
    b3 = _bc(net, x, 64, 1, "branch3x3dbl_1")
    b3 = _bc(net, _bc(net, b3, 96, 3, "branch3x3dbl_2", padding=1), 96, 3, "branch3x3dbl_3", padding=1)
    bp = _bc(net, _avgpool3(net, x), pool_features, 1, "branch_pool")
    return net.concat([b1, b5, b3, bp], axis=1)


def _inception_b(net: Net, x: TensorSpec) -> TensorSpec:
    b3 = _bc(net, x, 384, 3, "branch3x3", stride=2)
    bd = _bc(net, _bc(net, x, 64, 1, "branch3x3dbl_1"), 96, 3, "branch3x3dbl_2", padding=1)
    bd = _bc(net, bd, 96, 3, "branch3x3dbl_3", stride=2)
    bp = net.pool(x, "max", 3, stride=2, name="branch_pool")
    return net.concat([b3, bd, bp], axis=1)


def _inception_c(net: Net, x: TensorSpec, c7: int) -> TensorSpec:
    b1 = _bc(net, x, 192, 1, "branch1x1")
    b7 = _bc(net, x, c7, 1, "branch7x7_1")
    b7 = _bc(net, b7, c7, (1, 7), "branch7x7_2", padding=(0, 3))
    b7 = _bc(net, b7, 192, (7, 1), "branch7x7_3", padding=(3, 0))
    bd = _bc(net, x, c7, 1, "branch7x7dbl_1")
    bd = _bc(net, bd, c7, (7, 1), "branch7x7dbl_2", padding=(3, 0))
    bd = _bc(net, bd, c7, (1, 7), "branch7x7dbl_3", padding=(0, 3))
    bd = _bc(net, bd, c7, (7, 1), "branch7x7dbl_4", padding=(3, 0))
    bd = _bc(net, bd, 192, (1, 7), "branch7x7dbl_5", padding=(0, 3))
    bp = _bc(net, _avgpool3(net, x), 192, 1, "branch_pool")
    return net.concat([b1, b7, bd, bp], axis=1)


def _inception_d(net: Net, x: TensorSpec) -> TensorSpec:
    b3 = _bc(net, _bc(net, x, 192, 1, "branch3x3_1"), 320, 3, "branch3x3_2", stride=2)
    b7 = _bc(net, x, 192, 1, "branch7x7x3_1")
    b7 = _bc(net, b7, 192, (1, 7), "branch7x7x3_2", padding=(0, 3))
    b7 = _bc(net, b7, 192, (7, 1), "branch7x7x3_3", padding=(3, 0))
    b7 = _bc(net, b7, 192, 3, "branch7x7x3_4", stride=2)
    bp = net.pool(x, "max", 3, stride=2, name="branch_pool")
    return net.concat([b3, b7, bp], axis=1)


def _inception_e(net: Net, x: TensorSpec) -> TensorSpec:
    b1 = _bc(net, x, 320, 1, "branch1x1")
    b3 = _bc(net, x, 384, 1, "branch3x3_1")
    b3 = net.concat([_bc(net, b3, 384, (1, 3), "branch3x3_2a", padding=(0, 1)),
                     _bc(net, b3, 384, (3, 1), "branch3x3_2b", padding=(1, 0))], axis=1, name="concat3x3")
    bd = _bc(net, _bc(net, x, 448, 1, "branch3x3dbl_1"), 384, 3, "branch3x3dbl_2", padding=1)
    bd = net.concat([_bc(net, bd, 384, (1, 3), "branch3x3dbl_3a", padding=(0, 1)),
                     _bc(net, bd, 384, (3, 1), "branch3x3dbl_3b", padding=(1, 0))], axis=1, name="concat3x3dbl")
    bp = _bc(net, _avgpool3(net, x), 192, 1, "branch_pool")
    return net.concat([b1, b3, bd, bp], axis=1)


def _inception_aux(net: Net, x: TensorSpec, classes: int) -> TensorSpec:
    y = net.pool(x, "avg", 5, stride=3, name="avgpool5")
    y = _bc(net, y, 128, 1, "conv0")
    y = _bc(net, y, 768, 5, "conv1")
    y = net.global_avgpool(y)
    return net.linear(y, classes, name="fc")


def build_inception_v3(name: str, *, batch: int, seq: int, phase: str, dtype: str,
                       aux_logits: bool | None = None, **_: Any) -> OpGraph:
    """Inception-v3 in torchvision's layout (299x299 input by default).

    ``aux_logits`` (default: on in the train phase only, as torchvision computes the auxiliary
    classifier in training mode only) adds the auxiliary head on Mixed_6e and, when training, its
    cross-entropy weighted as in ``data/cnn.toml``. Parameters are 23,834,568 without it and
    27,161,264 with it (the torchvision model card counts the latter).
    """
    cfg = _cfg(name)
    net = Net(name, dtype=dtype, phase=phase)
    aux = net.train if aux_logits is None else bool(aux_logits)
    x = _image(net, batch, seq)
    x = _bc(net, x, 32, 3, "Conv2d_1a_3x3", stride=2)
    x = _bc(net, x, 32, 3, "Conv2d_2a_3x3")
    x = _bc(net, x, 64, 3, "Conv2d_2b_3x3", padding=1)
    x = net.pool(x, "max", 3, stride=2, name="maxpool1")
    x = _bc(net, x, 80, 1, "Conv2d_3b_1x1")
    x = _bc(net, x, 192, 3, "Conv2d_4a_3x3")
    x = net.pool(x, "max", 3, stride=2, name="maxpool2")
    for tag, pf in zip(("5b", "5c", "5d"), cfg["inception_a_pool"], strict=True):
        with net.group(f"Mixed_{tag}"):
            x = _inception_a(net, x, int(pf))
    with net.group("Mixed_6a"):
        x = _inception_b(net, x)
    for tag, c7 in zip(("6b", "6c", "6d", "6e"), cfg["inception_c_width"], strict=True):
        with net.group(f"Mixed_{tag}"):
            x = _inception_c(net, x, int(c7))
    classes = int(cfg["classes"])
    aux_logits_t = None
    if aux:
        with net.group("AuxLogits"):
            aux_logits_t = _inception_aux(net, x, classes)
    with net.group("Mixed_7a"):
        x = _inception_d(net, x)
    for tag in ("7b", "7c"):
        with net.group(f"Mixed_{tag}"):
            x = _inception_e(net, x)
    logits = _head(net, x, classes, dropout=True)
    meta = {"model": name, "batch": batch, "image_size": seq, "aux_logits": aux}
    if net.train and aux_logits_t is not None:
        main = net.classification_loss(logits, name="loss_main")
        side = net.classification_loss(aux_logits_t, name="loss_aux")
        weight = net.input("loss_aux.weight", (1,))  # the constant 0.4 (a hyperparameter, not a parameter)
        side = net.binary("mul", side, weight, name="loss_aux.scale")
        net.add(main, side, name="loss")
        return net.build(**meta, aux_weight=float(cfg["aux_weight"]))
    return _finish(net, logits, **meta)


# ------------------------------------------------------------------------------------------------
# registry


def _sized(fn: Callable[..., OpGraph], default: int) -> Callable[..., OpGraph]:
    """``fn`` with a located error for an image side too small for the network: a convolution's filter or a
    pool's window larger than what reaches it had been reported at that op alone, without the flag that set it.
    The side is to blame when the same build at the model's own side (``default``) succeeds; the smallest side
    accepted is found by bisection (a convolution or pool's output side never shrinks as its input grows)."""

    def build(name: str, *, seq: int, **kw: Any) -> OpGraph:
        try:
            return fn(name, seq=seq, **kw)
        except GraphError as exc:
            if seq >= default or not _builds(fn, name, default, kw):
                raise
            lo, hi = seq + 1, default  # hi builds, seq does not
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if _builds(fn, name, mid, kw) else (mid + 1, hi)
            raise GraphError(f"model {name!r}: image side (seq, --seq): got {seq}; expected at least {lo} for phase "
                             f"{kw.get('phase')!r} (the model's input size is {default}): at {seq}, {exc}") from None

    build.__doc__ = fn.__doc__
    return build


def _builds(fn: Callable[..., OpGraph], name: str, seq: int, kw: dict[str, Any]) -> bool:
    try:
        fn(name, seq=seq, **kw)
    except GraphError:
        return False
    return True


def _register() -> None:
    data = load_data(_DATA)
    builders = {"resnet18": build_resnet, "resnet50": build_resnet, "resnet101": build_resnet,
                "resnet152": build_resnet, "vgg16": build_vgg, "mobilenet_v2": build_mobilenet_v2,
                "efficientnet_b0": build_efficientnet, "inception_v3": build_inception_v3}
    for key, fn in builders.items():
        cfg = data[key]
        register_model(ModelEntry(
            name=key, family="cnn", description=cfg["description"], source=cfg["source"],
            builder=_sized(fn, int(cfg["image_size"])),
            defaults={"batch": 1, "seq": int(cfg["image_size"]), "dtype": "fp32", "phase": "forward"},
            phases=("forward", "train"),
        ))


_register()

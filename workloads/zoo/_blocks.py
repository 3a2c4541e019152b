"""Layer helpers (conv, norms, linear, pooling, losses) that the CNN, RNN, DLRM and UNet zoo builders share.

A :class:`Net` wraps a :class:`~workloads.ir.GraphBuilder` and names every weight after the current
group path, the way a framework's ``state_dict`` would (``layer1.0.conv1.weight``), so that two
layers never share a weight by accident and parameter counts can be checked against published ones.

Conventions kept here, once:

* a linear layer's weight is stored ``(in, out)`` (the IR multiplies ``x @ W``); its element count is
  the framework's ``(out, in)`` one;
* batch-norm carries its two learned vectors (scale, shift); running statistics are buffers, not
  parameters, and are folded in at inference (``training`` attr set in the train phase);
* dropout appears only in the train phase (it is the identity at inference).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from workloads.ir import GraphBuilder, OpGraph, TensorSpec

__all__ = ["Net", "check_phase"]

PHASES = ("forward", "train")


def check_phase(model: str, phase: str) -> bool:
    """True for ``"train"``, False for ``"forward"``; ValueError naming the model otherwise."""
    if phase not in PHASES:
        raise ValueError(f"model {model!r}: phase {phase!r} not supported; expected one of {', '.join(PHASES)}")
    return phase == "train"


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    a, b = v
    return int(a), int(b)


class Net:
    """Graph builder with layer helpers for one model build.

    Parameters
    ----------
    name
        Graph name (the zoo entry's name).
    dtype
        Activation and weight dtype (``"fp32"``, ``"bf16"``, ...).
    phase
        ``"forward"`` or ``"train"``.
    """

    def __init__(self, name: str, *, dtype: str, phase: str) -> None:
        self.train = check_phase(name, phase)
        self.phase = phase
        self.b = GraphBuilder(name, dtype=dtype)

    # --- structure -----------------------------------------------------------------------------
    @contextmanager
    def group(self, name: str) -> Iterator[None]:
        """Nest ops and weights under ``name``."""
        with self.b.group(name):
            yield

    def weight(self, name: str, shape: Sequence[int]) -> TensorSpec:
        """A parameter tensor named ``<group>.<name>``."""
        g = self.b.current_group
        return self.b.weight(f"{g}.{name}" if g else name, shape)

    def input(self, name: str, shape: Sequence[int], dtype: str | None = None) -> TensorSpec:
        return self.b.input(name, shape, dtype)

    def build(self, **meta: object) -> OpGraph:
        return self.b.build({"phase": self.phase, **meta})

    # --- layers --------------------------------------------------------------------------------
    def conv(
        self,
        x: TensorSpec,
        out_ch: int,
        kernel: int | Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = False,
        name: str = "conv",
    ) -> TensorSpec:
        """2-D convolution, weight ``(out, in/groups, kh, kw)`` [+ bias ``(out,)``]."""
        kh, kw = _pair(kernel)
        ins = [x, self.weight(f"{name}.weight", (out_ch, x.shape[1] // groups, kh, kw))]
        if bias:
            ins.append(self.weight(f"{name}.bias", (out_ch,)))
        attrs: dict[str, object] = {"stride": _pair(stride), "padding": _pair(padding)}
        if groups != 1:
            attrs["groups"] = groups
        return self.b.op("conv2d", ins, name=name, **attrs)

    def batchnorm(self, x: TensorSpec, name: str = "bn") -> TensorSpec:
        c = x.shape[1]
        ins = [x, self.weight(f"{name}.weight", (c,)), self.weight(f"{name}.bias", (c,))]
        return self.b.op("batchnorm", ins, name=name, training=self.train)

    def groupnorm(self, x: TensorSpec, groups: int, name: str = "norm") -> TensorSpec:
        c = x.shape[1]
        ins = [x, self.weight(f"{name}.weight", (c,)), self.weight(f"{name}.bias", (c,))]
        return self.b.op("groupnorm", ins, name=name, groups=groups)

    def layernorm(self, x: TensorSpec, name: str = "norm") -> TensorSpec:
        d = x.shape[-1]
        ins = [x, self.weight(f"{name}.weight", (d,)), self.weight(f"{name}.bias", (d,))]
        return self.b.op("layernorm", ins, name=name)

    def linear(self, x: TensorSpec, out: int, *, bias: bool = True, name: str = "fc") -> TensorSpec:
        """``x @ W (+ b)`` over the last axis; W stored ``(in, out)``."""
        ins = [x, self.weight(f"{name}.weight", (x.shape[-1], out))]
        if bias:
            ins.append(self.weight(f"{name}.bias", (out,)))
        return self.b.op("matmul", ins, name=name)

    def act(self, x: TensorSpec, fn: str, name: str | None = None) -> TensorSpec:
        return self.b.op("elementwise", [x], name=name or fn, op=fn)

    def binary(self, fn: str, a: TensorSpec, b: TensorSpec, name: str | None = None) -> TensorSpec:
        return self.b.op("elementwise", [a, b], name=name or fn, op=fn)

    def add(self, a: TensorSpec, b: TensorSpec, name: str = "add") -> TensorSpec:
        return self.binary("add", a, b, name)

    def dropout(self, x: TensorSpec, name: str = "dropout") -> TensorSpec:
        """Dropout in the train phase (writing its mask: ``attrs training``); the identity (no op) at inference."""
        return self.b.op("elementwise", [x], name=name, op="dropout", training=True) if self.train else x

    def pool(
        self,
        x: TensorSpec,
        mode: str,
        kernel: int,
        *,
        stride: int | None = None,
        padding: int = 0,
        name: str | None = None,
    ) -> TensorSpec:
        s = kernel if stride is None else stride
        return self.b.op("pool2d", [x], name=name or f"{mode}pool", mode=mode, kernel=kernel, stride=s,
                         padding=padding)

    def global_avgpool(self, x: TensorSpec, name: str = "avgpool") -> TensorSpec:
        """Adaptive average pooling to 1x1, flattened to ``(N, C)``."""
        y = self.b.op("pool2d", [x], name=name, mode="avg", output_size=1)
        return self.reshape(y, (x.shape[0], x.shape[1]), name="flatten")

    def reshape(self, x: TensorSpec, shape: Sequence[int], name: str = "reshape") -> TensorSpec:
        return self.b.op("reshape", [x], name=name, shape=tuple(shape))

    def concat(self, xs: Sequence[TensorSpec], axis: int, name: str = "concat") -> TensorSpec:
        return self.b.op("concat", list(xs), name=name, axis=axis)

    # --- heads ---------------------------------------------------------------------------------
    def classification_loss(self, logits: TensorSpec, name: str = "loss", **attrs: object) -> TensorSpec:
        """Cross-entropy of ``logits (N, classes)`` against int64 labels ``(N,)``."""
        labels = self.b.input(f"{name}.labels", (logits.shape[0],), "int64")
        return self.b.op("cross_entropy", [logits, labels], name=name, **attrs)

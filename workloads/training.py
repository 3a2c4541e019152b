"""Derives a whole training step (forward, backward, gradient accumulation, recomputation, optimizer update) from a forward graph that ends in a loss.

:func:`training_graph` walks the forward graph backwards from its loss op(s) and emits, for each op
on the gradient path, the ops computing the gradients of its inputs: input- and weight-gradient
matmuls (``matmul`` with transpose attributes), ``conv*_bwd_data``/``conv*_bwd_weight``,
``elementwise_bwd``, ``*norm_bwd``, ``attention_bwd``, ``softmax_bwd``, ``embedding_bwd``,
``cross_entropy_bwd``, ``pool2d_bwd``, the MoE backward kinds, and views for reshapes and splits.
A tensor used by several ops (a residual stream, tied embeddings) has its gradient contributions
summed with ``elementwise`` adds. Then one ``optimizer_update`` op per weight reads the parameter,
its gradient and the optimizer state.

Roles and dtypes
----------------
* Weight gradients have role ``gradient`` and the weight's dtype; activation gradients are
  transient and keep role ``activation`` (so that :func:`workloads.analysis.peak_live_bytes`
  counts them while they live).
* Optimizer state has role ``optimizer_state``: with ``mixed_precision`` and a non-fp32 weight, an
  fp32 master copy plus the algorithm's moments in fp32 (AdamW: 4 + 4 + 4 = 12 bytes/parameter);
  without it, the moments in the weight's dtype and no master copy.

Recomputation
-------------
``recompute="selective"`` re-runs each layer's attention core (``attention``, ``softmax`` and the
weight-free matmuls and elementwise ops between them) just before its backward, as in Korthikanti
et al. 2022 (selective activation recomputation); ``"full"`` re-runs every op of each layer (a group
path whose prefix ends in a layer index, such as ``layers.3``) before that layer's backward.
Backward ops then read the recomputed tensors, so the forward copies die early.

Example
-------
>>> from workloads.zoo.transformer import TransformerConfig, train_forward
>>> cfg = TransformerConfig("tiny", vocab=512, d_model=64, layers=2, heads=4, d_ff=256)
>>> step = training_graph(train_forward(cfg, batch=2, seq_len=32, dtype="bf16"))
>>> from workloads.ir import Role
>>> step.role_bytes(Role.OPTIMIZER_STATE) == 12 * step.params
True
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from nodeperf.errors import NodeperfWarning
from nodeperf.suggest import did_you_mean
from workloads.dtypes import DType
from workloads.ir import Attrs, GraphError, Op, OpGraph, Role, TensorSpec, UnsupportedOpError
from workloads.recompute import POLICIES

__all__ = ["training_graph", "prune_dead_recompute", "OPTIMIZERS", "RECOMPUTE", "LOSS_KINDS", "optimizer_state_dtypes"]

log = logging.getLogger(__name__)

#: optimizer -> number of moment tensors it keeps per weight
OPTIMIZERS: dict[str, int] = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
#: recomputation policies by name (:mod:`workloads.recompute`)
RECOMPUTE: tuple[str, ...] = POLICIES
#: loss kinds and their backward kinds
LOSS_KINDS: dict[str, str] = {"cross_entropy": "cross_entropy_bwd", "mse_loss": "mse_loss_bwd"}
_NO_GRAD_KINDS = frozenset({"kv_append", "generic", "optimizer_update", "recv"})


def optimizer_state_dtypes(weight: TensorSpec, optimizer: str, mixed_precision: bool) -> list[tuple[str, DType]]:
    """(suffix, dtype) of the optimizer-state tensors kept for ``weight``."""
    out: list[tuple[str, DType]] = []
    if mixed_precision and weight.dtype is not DType.FP32:
        out.append(("master", DType.FP32))
    sdt = DType.FP32 if mixed_precision else weight.dtype
    moments = {0: (), 1: ("momentum",), 2: ("exp_avg", "exp_avg_sq")}[OPTIMIZERS[optimizer]]
    out += [(m, sdt) for m in moments]
    return out


def _layer_key(group: str) -> str | None:
    """The group prefix ending in the first numeric component (``encoder.layers.3.attn`` -> ``encoder.layers.3``)."""
    parts = group.split(".") if group else []
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return None


class _Deriver:
    """State of one derivation (not exported)."""

    def __init__(self, fg: OpGraph, optimizer: str, mixed_precision: bool, recompute: str,
                 output_copy: bool = False) -> None:
        self.fg = fg
        self.optimizer = optimizer
        self.mixed_precision = mixed_precision
        self.recompute = recompute
        self.output_copy = output_copy
        self.ops: list[Op] = list(fg.ops)
        self.names: set[str] = {op.name for op in fg.ops}
        self.tensor_names: set[str] = set(fg.tensors)
        self.remap: dict[str, TensorSpec] = {}
        self.contrib: dict[str, list[TensorSpec]] = {}
        self.hints: dict[str, int] = {}
        self.zeros: dict[str, TensorSpec] = {}
        self.semantics: dict[str, Any] = {}  # op kind -> its semantics (registry entry)

    # --- analysis -------------------------------------------------------------------------------
    def analyse(self) -> None:
        fg = self.fg
        self.losses = [op for op in fg.ops if op.kind in LOSS_KINDS]
        # a pipeline stage before the last ends in a send: its backward starts from the gradient the
        # next stage sends back
        self.sends = [op for op in fg.ops if op.kind == "send"]
        if not self.losses and not self.sends:
            kinds = sorted({op.kind for op in fg.ops})
            raise GraphError(
                f"graph {fg.name!r}: no loss op; got kinds {', '.join(kinds[:12])}{'...' if len(kinds) > 12 else ''}; "
                f"expected a forward graph built with phase='train' (ending in {' or '.join(LOSS_KINDS)}, or in a "
                "pipeline send)")
        req: set[str] = set()
        for op in fg.ops:
            if op.kind == "recv":  # activations from the previous pipeline stage: their gradient goes back
                req.update(t.name for t in op.outputs if t.dtype.is_float)
            for t in op.inputs:
                if t.role is Role.WEIGHT and t.dtype.is_float and fg.producer(t.name) is None:
                    req.add(t.name)
            if any(t.name in req for t in op.inputs):
                req.update(t.name for t in op.outputs if t.dtype.is_float)
        relevant: set[str] = set()
        for op in reversed(fg.ops):
            if op.kind in LOSS_KINDS or op.kind == "send" or any(
                    t.name in req and any(c in relevant for c in fg.consumer_names(t.name)) for t in op.outputs):
                relevant.add(op.name)
        self.req = req
        self.relevant = relevant
        need: dict[str, int] = {}
        for op in fg.ops:
            if op.name in relevant:
                for t in op.inputs:
                    if t.name in req:
                        need[t.name] = need.get(t.name, 0) + 1
        self.need = need
        self.weights = [t for t in fg.tensors.values() if t.role is Role.WEIGHT and t.name in req]
        # recomputation segments
        self.segment_of: dict[str, str] = {}
        self.pending: dict[str, list[Op]] = {}
        self.offloaded: set[str] = set()
        if self.recompute.startswith("modules:"):  # Megatron-Core's recompute_modules: the named modules only
            from workloads.recompute import module_segments

            self.segment_of.update(module_segments(fg, self.recompute))
        elif self.recompute not in ("none", "selective"):
            from workloads.recompute import policy_plan

            saved, self.offloaded = policy_plan(fg, self.recompute)
            for op in fg.ops:
                key = _layer_key(op.group)
                if key is not None and op.kind not in LOSS_KINDS and op.name not in saved | self.offloaded:
                    self.segment_of[op.name] = key
        elif self.recompute == "selective":
            core_out: set[str] = set()
            for op in fg.ops:
                weightless = all(t.role is not Role.WEIGHT for t in op.inputs)
                core = (op.kind in ("attention", "softmax")
                        or (op.kind == "matmul" and weightless and len(op.inputs) == 2)
                        or (op.kind == "elementwise" and weightless and op.inputs[0].name in core_out
                            and any(c.kind in ("softmax", "matmul") or c.kind == "elementwise"
                                    for o in op.outputs for c in fg.consumers(o.name))))
                if core:
                    core_out.update(t.name for t in op.outputs)
                    self.segment_of[op.name] = _layer_key(op.group) or op.group
        for op in fg.ops:  # ops that always re-run before their consumers' backward (a sequence-parallel
            again = op.attrs.get("recompute_in_backward")  # all-gather keeps only its local shard); a string
            if again:  # names a segment of several such ops, re-run together in forward order
                self.segment_of.setdefault(op.name, again if isinstance(again, str) else op.name)
        for op in fg.ops:
            key = self.segment_of.get(op.name)
            if key is not None:
                self.pending.setdefault(key, []).append(op)
        self.produced_by_segment = {t.name: self.segment_of[op.name] for op in fg.ops if op.name in self.segment_of
                                    for t in op.outputs}

    # --- emission helpers -------------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        name, n = base, 1
        while name in self.names:
            n += 1
            name = f"{base}#{n}"
        self.names.add(name)
        return name

    def emit(self, kind: str, inputs: Sequence[TensorSpec], name: str, group: str,
             out: Sequence[tuple[str, Role] | None] | None = None, out_dtype: DType | None = None,
             **attrs: Any) -> tuple[TensorSpec, ...]:
        opname = self._unique(name)
        a = Attrs(attrs)
        sem = self.semantics.get(kind)
        if sem is None:
            from workloads.semantics import semantics_of

            sem = self.semantics[kind] = semantics_of(kind, where=f"op {opname!r}")
        try:
            shapes = sem.infer(tuple(inputs), a)
        except GraphError as exc:
            raise GraphError(f"op {opname!r} ({kind}): {exc}") from None
        outs = []
        names = self.tensor_names
        for i, (shape, dt) in enumerate(shapes):
            hint = out[i] if out and i < len(out) else None
            tname, role = hint if hint else (opname if len(shapes) == 1 else f"{opname}:{i}", Role.ACTIVATION)
            if tname in names:
                tname = self._fresh_tensor(tname)
            names.add(tname)
            outs.append(TensorSpec(tname, tuple(map(int, shape)), out_dtype or dt or inputs[0].dtype, role))
        outs_t = tuple(outs)
        self.ops.append(Op(opname, kind, tuple(inputs), outs_t, a, group))
        return outs_t

    def _fresh_tensor(self, base: str) -> str:
        n = 2
        while f"{base}#{n}" in self.tensor_names:
            n += 1
        return f"{base}#{n}"

    def hint(self, t: TensorSpec) -> tuple[str, Role]:
        """Name and role for the next gradient contribution to ``t``."""
        k = self.hints.get(t.name, 0) + 1
        self.hints[t.name] = k
        if self.need.get(t.name, 0) <= 1:
            return f"grad:{t.name}", Role.GRADIENT if t.role is Role.WEIGHT else Role.ACTIVATION
        return f"grad:{t.name}@{k}", Role.ACTIVATION

    def R(self, t: TensorSpec) -> TensorSpec:
        """The forward tensor a backward op reads (its recomputed copy when there is one)."""
        return self.remap.get(t.name, t)

    def zeros_like(self, t: TensorSpec) -> TensorSpec:
        z = self.zeros.get(t.name)
        if z is None:
            z = TensorSpec(f"zeros:{t.name}", t.shape, t.dtype, Role.ACTIVATION)
            self.zeros[t.name] = z
        return z

    def reduce_to(self, g: TensorSpec, t: TensorSpec, name: str, group: str) -> TensorSpec:
        """Sum ``g`` over the axes ``t`` was broadcast along (the gradient of a broadcast)."""
        if g.shape == t.shape:
            return g
        r = len(g.shape)
        tgt = (1,) * (r - len(t.shape)) + t.shape
        axes = tuple(i for i in range(r) if tgt[i] == 1 and g.shape[i] != 1)
        h = self.hint(t)
        if axes:
            last = tgt == t.shape
            (g,) = self.emit("reduction", [g], f"{name}.reduce", group, out=[h] if last else None,
                             axes=axes, keepdims=True, op="sum")
            if last:
                return g
        (g,) = self.emit("reshape", [g], f"{name}.reshape", group, out=[h], shape=t.shape)
        return g

    # --- recomputation ----------------------------------------------------------------------------
    def maybe_recompute(self, op: Op) -> None:
        keys = set()
        if op.name in self.segment_of:
            keys.add(self.segment_of[op.name])
        for t in (*op.inputs, *op.outputs):
            k = self.produced_by_segment.get(t.name)
            if k is not None:
                keys.add(k)
        for key in sorted(keys):
            seg = self.pending.pop(key, None)
            if not seg:
                continue
            for fop in seg:
                ins = tuple(self.R(t) for t in fop.inputs)
                outs = []
                for t in fop.outputs:
                    nt = TensorSpec(self._fresh_tensor(f"{t.name}@recompute") if f"{t.name}@recompute" in self.tensor_names
                                    else f"{t.name}@recompute", t.shape, t.dtype, t.role)
                    self.tensor_names.add(nt.name)
                    outs.append(nt)
                    self.remap[t.name] = nt
                self.ops.append(Op(self._unique(f"{fop.name}@recompute"), fop.kind, ins, tuple(outs), fop.attrs,
                                   fop.group))
            if self.output_copy:
                self._restore_copies(key, seg)

    def _restore_copies(self, key: str, seg: list[Op]) -> None:
        """One device copy of each output a ``CheckpointWithoutOutput`` segment hands to an op outside it, from the
        recomputed tensor into the storage the forward released, which the backward then reads
        (``output.untyped_storage().copy_(recomputation_output.untyped_storage())`` in ``_recompute``,
        megatron/core/tensor_parallel/random.py @ NVIDIA/Megatron-LM 0d8e0714; :attr:`ParallelPlan.recompute_output_copy`).
        The copy is an eager ATen kernel of its own, which nothing fuses into or joins (``aten_fallback``,
        :data:`simulator.engines.walk.ATEN_FALLBACK`). Nothing for another segment
        (:func:`workloads.recompute.discards_output`)."""
        from workloads.recompute import discards_output

        if not discards_output(key):
            return
        inside = {fop.name for fop in seg}
        for fop in seg:
            for t in fop.outputs:
                if any(c.name not in inside for c in self.fg.consumers(t.name)):
                    (c,) = self.emit("elementwise", [self.remap[t.name]], f"{t.name}.restore_copy", fop.group,
                                     op="copy", aten_fallback=True)
                    self.remap[t.name] = c

    # --- accumulation -----------------------------------------------------------------------------
    def deliver(self, t: TensorSpec, g: TensorSpec, group: str) -> None:
        """Record ``g`` as a gradient contribution to ``t`` (renamed when a weight's sole gradient)."""
        if g.dtype is not t.dtype and t.dtype.is_float:
            (g,) = self.emit("elementwise", [g], f"{t.name}.grad_cast", group, out_dtype=t.dtype, op="cast")
        if self.need.get(t.name, 0) <= 1 and t.role is Role.WEIGHT and g.name != f"grad:{t.name}":
            (g,) = self.emit("reshape", [g], f"{t.name}.grad_view", group, out=[(f"grad:{t.name}", Role.GRADIENT)],
                             shape=t.shape)
        self.contrib.setdefault(t.name, []).append(g)

    def finalize(self, t: TensorSpec, group: str) -> TensorSpec | None:
        parts = self.contrib.get(t.name, [])
        if not parts:
            return None
        acc = parts[0]
        for i, p in enumerate(parts[1:], start=2):
            last = i == len(parts)
            role = Role.GRADIENT if t.role is Role.WEIGHT else Role.ACTIVATION
            out = [(f"grad:{t.name}", role)] if last else None
            (acc,) = self.emit("elementwise", [acc, p], f"grad_acc:{t.name}@{i}", group, out=out, op="add")
        return acc

    # --- the walk -----------------------------------------------------------------------------------
    def run(self) -> OpGraph:
        self.analyse()
        for op in reversed(self.fg.ops):
            if op.name not in self.relevant or not any(t.name in self.req for t in op.inputs):
                continue
            self.maybe_recompute(op)
            dys = [self.finalize(t, op.group) if t.name in self.req else None for t in op.outputs]
            if op.kind not in LOSS_KINDS and op.kind != "send" and all(d is None for d in dys):
                continue
            rule = _RULES.get(op.kind)
            if rule is None or op.kind in _NO_GRAD_KINDS:
                raise UnsupportedOpError(
                    f"graph {self.fg.name!r}: op {op.name!r} ({op.kind}): no backward rule for kind {op.kind!r}; "
                    f"expected a differentiable kind ({', '.join(sorted(_RULES))})"
                    + (did_you_mean(op.kind, _RULES) if op.kind not in _NO_GRAD_KINDS else ""))
            grads = rule(self, op, dys)
            for t, g in zip(op.inputs, grads, strict=True):
                if t.name in self.req:
                    if g is None:
                        raise UnsupportedOpError(
                            f"graph {self.fg.name!r}: op {op.name!r} ({op.kind}): no gradient for input {t.name!r}; "
                            "expected every floating-point input derived from weights to be differentiable")
                    self.deliver(t, g, op.group)
        # gradients of the activations received from the previous pipeline stage go back to it
        for op in self.fg.ops:
            if op.kind == "recv":
                for t in op.outputs:
                    g = self.finalize(t, op.group) if t.name in self.req else None
                    if g is not None:
                        self.emit("send", [g], f"{op.name}.bwd", op.group, group_size=int(op.attrs.get("group_size", 2)),
                                  stride=int(op.attrs.get("stride", 1)))
        # weight gradients and optimizer
        missing = 0
        updates: list[tuple[TensorSpec, TensorSpec]] = []
        for w in self.weights:
            g = self.finalize(w, "optimizer")
            if g is None:
                missing += 1
                continue
            updates.append((w, g))
        if missing:  # the caller's graph can avoid it: a warning it may filter (NodeperfWarning)
            warnings.warn(f"graph {self.fg.name!r}: {missing} weight(s) get no gradient from the loss and are not "
                          "updated", NodeperfWarning, stacklevel=3)
        for w, g in updates:
            ins = [w, g]
            for suffix, dt in optimizer_state_dtypes(w, self.optimizer, self.mixed_precision):
                ins.append(TensorSpec(f"{w.name}.{suffix}", w.shape, dt, Role.OPTIMIZER_STATE))
            sparse = {"sparse_rows": g.shape[0]} if g.shape != w.shape else {}
            self.emit("optimizer_update", ins, f"optimizer.{w.name}", "optimizer",
                      out=[(f"{w.name}.updated", Role.WEIGHT)], algorithm=self.optimizer, **sparse)
        meta = dict(self.fg.meta)
        meta.update({"phase": "train_step", "optimizer": self.optimizer, "mixed_precision": self.mixed_precision,
                     "recompute": self.recompute, "weights_without_gradient": missing})
        from workloads.recompute import needs_unfuse

        if needs_unfuse(self.recompute):  # its forward graph was rewritten (unfuse_projections)
            meta["forward_ops"] = len(self.fg.ops)
        if self.offloaded:  # tensors a policy keeps in host memory between the forward and backward passes
            meta["offloaded_activations"] = tuple(sorted(t.name for op in self.fg.ops if op.name in self.offloaded
                                                         for t in op.outputs))
        # forward ops come validated, emitted ops were inferred by emit() and recomputed ops copy forward
        # shapes: nothing needs inferring again
        return OpGraph(self.fg.name, self.ops, meta, inferred=self.names)


# ------------------------------------------------------------------------------------------------
# backward rules: rule(deriver, op, dys) -> one gradient (or None) per op input

Rule = Callable[[_Deriver, Op, list[TensorSpec | None]], list[TensorSpec | None]]
_RULES: dict[str, Rule] = {}


def _rule(*kinds: str) -> Callable[[Rule], Rule]:
    def deco(f: Rule) -> Rule:
        for k in kinds:
            _RULES[k] = f
        return f

    return deco


def _needs(d: _Deriver, op: Op) -> list[bool]:
    return [t.name in d.req for t in op.inputs]


@_rule("matmul")
def _bwd_matmul(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    a, b = op.inputs[0], op.inputs[1]
    ta, tb = bool(op.attrs.get("transpose_a", False)), bool(op.attrs.get("transpose_b", False))
    need = _needs(d, op)
    grads: list[TensorSpec | None] = [None] * len(op.inputs)
    g = op.group
    if need[0]:
        if not ta:
            (ga,) = d.emit("matmul", [dy, d.R(b)], f"{op.name}.bwd_a", g, transpose_b=not tb)
        else:
            (ga,) = d.emit("matmul", [d.R(b), dy], f"{op.name}.bwd_a", g, transpose_a=tb, transpose_b=True)
        grads[0] = d.reduce_to(ga, a, f"{op.name}.bwd_a", g) if ga.shape != a.shape else ga
    if need[1]:
        if len(b.shape) == 2 and len(a.shape) != 2:
            if ta:
                raise UnsupportedOpError(f"op {op.name!r} (matmul): weight gradient of a transposed batched operand "
                                         f"{a.shape} with a 2-D weight; expected transpose_a only for 2-D or batched weights")
            k = a.shape[-1]
            a2 = d.emit("reshape", [d.R(a)], f"{op.name}.bwd_b.flat_a", g, shape=(-1, k))[0]
            dy2 = d.emit("reshape", [dy], f"{op.name}.bwd_b.flat_dy", g, shape=(-1, dy.shape[-1]))[0]
            lhs, rhs = (a2, dy2) if not tb else (dy2, a2)
            (gb,) = d.emit("matmul", [lhs, rhs], f"{op.name}.bwd_b", g, out=[d.hint(b)], transpose_a=True)
        elif not tb:
            (gb,) = d.emit("matmul", [d.R(a), dy], f"{op.name}.bwd_b", g, transpose_a=not ta)
        else:
            (gb,) = d.emit("matmul", [dy, d.R(a)], f"{op.name}.bwd_b", g, transpose_a=True, transpose_b=ta)
        grads[1] = d.reduce_to(gb, b, f"{op.name}.bwd_b", g) if gb.shape != b.shape else gb
    if len(op.inputs) == 3 and need[2]:
        grads[2] = d.reduce_to(dy, op.inputs[2], f"{op.name}.bwd_bias", g)
    return grads


def _conv_attrs(op: Op) -> dict[str, Any]:
    return {k: op.attrs[k] for k in ("stride", "padding", "dilation", "groups") if k in op.attrs}


@_rule("conv2d", "conv1d")
def _bwd_conv(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x, w = op.inputs[0], op.inputs[1]
    need = _needs(d, op)
    grads: list[TensorSpec | None] = [None] * len(op.inputs)
    g = op.group
    if need[0]:
        grads[0] = d.emit(f"{op.kind}_bwd_data", [dy, d.R(w)], f"{op.name}.bwd_data", g, out=[d.hint(x)],
                          input_shape=x.shape, **_conv_attrs(op))[0]
    if need[1]:
        grads[1] = d.emit(f"{op.kind}_bwd_weight", [d.R(x), dy], f"{op.name}.bwd_weight", g, out=[d.hint(w)],
                          weight_shape=w.shape, **_conv_attrs(op))[0]
    if len(op.inputs) == 3 and need[2]:
        axes = (0,) + tuple(range(2, len(dy.shape)))
        grads[2] = d.emit("reduction", [dy], f"{op.name}.bwd_bias", g, out=[d.hint(op.inputs[2])], axes=axes,
                          op="sum")[0]
    return grads


_ALIAS_GRAD = frozenset({"add", "identity", "copy"})
#: elementwise ops whose gradient reads only the output gradient: RoPE too, a rotation linear in its input
#: (Transformer Engine's FusedRoPEFunc saves only the angles: transformer_engine/pytorch/attention/rope.py
#: @ v2.9, ``ctx.save_for_backward(freqs, cu_seqlens)``, backward ``fused_rope_backward(grad_output, freqs, ...)``)
_NO_INPUT_GRAD = frozenset({"scale", "neg", "mask", "dropout", "cast", "rope"})


@_rule("elementwise")
def _bwd_elementwise(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    fn = op.attrs["op"]
    need = _needs(d, op)
    g = op.group
    grads: list[TensorSpec | None] = [None] * len(op.inputs)
    fb = {"aten_fallback": True} if op.attrs.get("aten_fallback") else {}  # an ATen fallback's gradient is one too
    if fn == "clip" and op.attrs.get("bounds") and need[0]:
        return [_clamp_grad(d, op, dy, fb)]
    for i, t in enumerate(op.inputs):
        if not need[i]:
            continue
        base = f"{op.name}.bwd" if len(op.inputs) == 1 else f"{op.name}.bwd_{i}"
        if fn in _ALIAS_GRAD or (fn == "sub" and i == 0):
            gi = dy
        elif fn == "sub":
            gi = d.emit("elementwise_bwd", [dy], base, g, op="neg", **fb)[0]
        elif fn in _NO_INPUT_GRAD:
            gi = d.emit("elementwise_bwd", [dy], base, g, out_dtype=t.dtype, op=fn, **fb)[0]
        elif len(op.inputs) == 1:
            gi = d.emit("elementwise_bwd", [dy, d.R(t)], base, g, out=[d.hint(t)] if dy.shape == t.shape else None,
                        op=fn, **fb)[0]
        else:  # binary/ternary: the gradient reads the other operand(s)
            others = [d.R(o) for j, o in enumerate(op.inputs) if j != i][:2]
            gi = d.emit("elementwise_bwd", [dy, *others], base, g, out=[d.hint(t)] if dy.shape == t.shape else None,
                        op=fn, **fb)[0]
        grads[i] = d.reduce_to(gi, t, base, g) if gi.shape != t.shape else gi
    return grads


#: the comparisons of PyTorch's ``clamp_backward`` per clamped side (``bounds`` of a ``clip`` op)
_CLAMP_MASKS = {"min": ("ge",), "max": ("le",), "both": ("ge", "le")}


def _clamp_grad(d: _Deriver, op: Op, dy: TensorSpec, fb: dict[str, bool]) -> TensorSpec:
    """The gradient of an eager ``torch.clamp`` whose ``bounds`` attribute says which sides it clamps, as PyTorch's
    autograd computes it (torch/csrc/autograd/FunctionsManual.cpp ``clamp_backward``: ``where(self <= max, grad,
    0)``, ``where(self >= min, ...)``, or ``where((self >= min).logical_and_(self <= max), ...)`` with both): one
    comparison kernel per side writing a bool mask, their in-place ``logical_and_`` with two, then ``where``
    reading the mask and the gradient."""
    x, g = d.R(op.inputs[0]), op.group
    sides = _CLAMP_MASKS.get(op.attrs["bounds"])
    if sides is None:
        raise GraphError(f"op {op.name!r} (elementwise clip): bounds: got {op.attrs['bounds']!r}; expected one of "
                         f"{', '.join(_CLAMP_MASKS)}")
    masks = [d.emit("elementwise_bwd", [x], f"{op.name}.bwd_{s}", g, out_dtype=DType.BOOL, op=s, **fb)[0]
             for s in sides]
    mask = masks[0] if len(masks) == 1 else d.emit("elementwise_bwd", masks, f"{op.name}.bwd_and", g,
                                                   op="logical_and", **fb)[0]
    return d.emit("elementwise_bwd", [mask, dy], f"{op.name}.bwd", g, out=[d.hint(op.inputs[0])], out_dtype=dy.dtype,
                  op="where", **fb)[0]


@_rule("layernorm", "rmsnorm", "groupnorm", "batchnorm")
def _bwd_norm(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    ins = [dy, d.R(op.inputs[0])] + ([d.R(op.inputs[1])] if len(op.inputs) > 1 else [])
    hints = [d.hint(t) if t.name in d.req else None for t in op.inputs]
    attrs = {k: v for k, v in op.attrs.items() if k in ("groups", "axis", "eps")}
    outs = d.emit(f"{op.kind}_bwd", ins, f"{op.name}.bwd", op.group, out=hints, has_bias=len(op.inputs) == 3, **attrs)
    return list(outs[: len(op.inputs)])


@_rule("softmax")
def _bwd_softmax(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    return [d.emit("softmax_bwd", [d.R(op.outputs[0]), dy], f"{op.name}.bwd", op.group, out=[d.hint(x)],
                   axis=op.attrs.get("axis", -1))[0]]


@_rule("attention")
def _bwd_attention(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    q, k, v = op.inputs[:3]
    bias = op.inputs[3] if len(op.inputs) == 4 else None
    ins = [d.R(q), d.R(k), d.R(v), d.R(op.outputs[0]), dy]
    hints = [d.hint(t) if t.name in d.req else None for t in (q, k, v)]
    has_bias = bias is not None and bias.name in d.req
    if has_bias:
        assert bias is not None
        ins.append(d.R(bias))
        hints.append(d.hint(bias))
    outs = d.emit("attention_bwd", ins, f"{op.name}.bwd", op.group, out=hints,
                  causal=bool(op.attrs.get("causal", False)), has_bias=has_bias,
                  **({"window": op.attrs["window"]} if op.attrs.get("window") else {}))
    grads: list[TensorSpec | None] = list(outs[:3])
    if bias is not None:
        grads.append(outs[3] if has_bias else None)
    return grads


@_rule("embedding")
def _bwd_embedding(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    table = op.inputs[1]
    # a table marked sparse (torch nn.Embedding(sparse=True), as DLRM uses) and used once gets a gradient
    # of the looked-up rows only; several uses would need their sparse gradients concatenated: dense then
    rows = op.inputs[0].numel if op.attrs.get("sparse") and d.need.get(table.name, 0) <= 1 else None
    extra = {"sparse_rows": rows} if rows else {}
    g = d.emit("embedding_bwd", [dy], f"{op.name}.bwd", op.group, out=[d.hint(table)], table_shape=table.shape,
               out_dtype=table.dtype, **extra)[0]
    return [None, g]


@_rule("cross_entropy", "mse_loss")
def _bwd_loss(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    pred = op.inputs[0]
    ins = [d.R(t) for t in op.inputs]
    (gp,) = d.emit(LOSS_KINDS[op.kind], ins, f"{op.name}.bwd", op.group, out=[d.hint(pred)])
    grads: list[TensorSpec | None] = [gp if pred.name in d.req else None]
    for t in op.inputs[1:]:
        grads.append(d.emit("elementwise_bwd", [gp], f"{op.name}.bwd_target", op.group, op="neg")[0]
                     if t.name in d.req else None)
    return grads


@_rule("pool2d")
def _bwd_pool(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    attrs = {k: v for k, v in op.attrs.items() if k in ("mode", "kernel", "stride", "padding", "ceil_mode", "output_size")}
    if "output_size" in attrs and "kernel" not in attrs:  # adaptive: the window each output covers
        attrs["kernel"] = (max(1, x.shape[2] // dy.shape[2]), max(1, x.shape[3] // dy.shape[3]))
    return [d.emit("pool2d_bwd", [dy, d.R(x)], f"{op.name}.bwd", op.group, out=[d.hint(x)], input_shape=x.shape,
                   **attrs)[0]]


@_rule("resize")
def _bwd_resize(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    scale = op.attrs.get("scale", 2)
    return [d.emit("pool2d", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], mode="sum", kernel=scale,
                   stride=scale)[0]]


@_rule("reshape")
def _bwd_reshape(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    n = int(op.attrs.get("grad_all_reduce", 1))
    if n > 1:  # Megatron's "f": identity forward, all-reduce of the input gradient over the TP ranks
        return [d.emit("all_reduce", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], group_size=n)[0]]
    return [d.emit("reshape", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], shape=x.shape)[0]]


@_rule("send")
def _bwd_send(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    """A pipeline send: the gradient of what was sent arrives from the next stage (a ``recv``)."""
    x = op.inputs[0]
    n, stride, shards = int(op.attrs.get("group_size", 2)), int(op.attrs.get("stride", 1)), int(op.attrs.get("shards", 1))
    if shards > 1:  # scatter/gather: each tensor-parallel rank receives 1/shards and all-gathers the rest
        (part,) = d.emit("recv", [], f"{op.name}.bwd", op.group, shape=(x.numel // shards,), dtype=x.dtype.value,
                         group_size=n, stride=stride)
        (full,) = d.emit("all_gather", [part], f"{op.name}.bwd.gather", op.group, group_size=shards, axis=0)
        return [d.emit("reshape", [full], f"{op.name}.bwd.unflatten", op.group, out=[d.hint(x)], shape=x.shape)[0]]
    return [d.emit("recv", [], f"{op.name}.bwd", op.group, out=[d.hint(x)], shape=x.shape, dtype=x.dtype.value,
                   group_size=n, stride=stride)[0]]


@_rule("all_to_all")
def _bwd_all_to_all(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    """An all-to-all's backward sends every gradient chunk back where it came from: an all-to-all."""
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    dedup = {k: v for k, v in op.attrs.items() if k.startswith("dedup_")}  # DeepEP's sizes, both ways
    return [d.emit("all_to_all", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)],
                   group_size=int(op.attrs.get("group_size", 1)), stride=int(op.attrs.get("stride", 1)), **dedup)[0]]


@_rule("all_reduce")
def _bwd_all_reduce(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    """Megatron's "g": the forward all-reduce of partial sums; every rank's gradient is the same,
    so the backward is the identity (a view)."""
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    return [d.emit("reshape", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], shape=x.shape)[0]]


@_rule("all_gather", "reduce_scatter")
def _bwd_gather_scatter(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    """Conjugate collectives (sequence parallelism): an all-gather's backward is a reduce-scatter of
    the gradient along the same axis, and a reduce-scatter's an all-gather."""
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    if op.kind == "all_gather" and op.attrs.get("ring_steps"):
        return [_bwd_torch_ring_gather(d, op, dy)]
    kind = "reduce_scatter" if op.kind == "all_gather" else "all_gather"
    return [d.emit(kind, [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)],
                   group_size=int(op.attrs.get("group_size", 1)), axis=int(op.attrs.get("axis", 0)))[0]]


def _bwd_torch_ring_gather(d: _Deriver, op: Op, dy: TensorSpec) -> TensorSpec:
    """The backward of PyTorch's ring attention for one gathered tensor (keys or values), as
    ``_templated_ring_attention_backward`` (torch/distributed/tensor/experimental/_attention.py) runs it:
    its ``kv_rotater`` all-gathers the keys and values again (``{name}.bwd.regather``, waited at step 1),
    and its ``dkv_rotater`` (always ``_RotateMethod.ALL_TO_ALL``) passes the fp32 accumulator
    (``accum_dtype = float32`` under ``convert_to_f32``) to the next rank once per step
    (``{name}.bwd.dkv<i>``: ``ft_c.permute_tensor``, an ``all_to_all_single`` whose whole buffer goes to
    one peer, so its nccl-tests size is ``n / (n - 1)`` times the buffer); the last is waited on at
    once and cast back to the input dtype. The steps' own gradient arithmetic is the autodiff of the
    forward ring (its slices' and chunks' backward)."""
    x = op.inputs[0]
    n, stride = int(op.attrs.get("group_size", 1)), int(op.attrs.get("stride", 1))
    (again,) = d.emit("all_gather", [d.R(x)], f"{op.name}.bwd.regather", op.group, group_size=n, stride=stride,
                      axis=int(op.attrs.get("axis", 0)))
    (mine,) = d.emit("slice", [again], f"{op.name}.bwd.regather_local", op.group, shape=x.shape)
    (local,) = d.emit("slice", [dy], f"{op.name}.bwd.local", op.group, shape=x.shape)
    # step 0's ``grad_key += grad_key_`` into the fp32 accumulator; it reads the re-gathered buffer, which
    # the steps' kernels read (so that buffer lives through this layer's backward only)
    (acc,) = d.emit("elementwise", [local, mine], f"{op.name}.bwd.acc0", op.group, op="add", out_dtype=DType.FP32)
    size = float(acc.nbytes) * n / max(1, n - 1)
    for i in range(int(op.attrs["ring_steps"])):
        (acc,) = d.emit("all_to_all", [acc], f"{op.name}.bwd.dkv{i}", op.group, group_size=n, stride=stride,
                        size_bytes=size)
    return d.emit("elementwise", [acc], f"{op.name}.bwd", op.group, out=[d.hint(x)], op="cast",
                  out_dtype=x.dtype)[0]


@_rule("transpose")
def _bwd_transpose(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    perm = tuple(op.attrs.get("perm", tuple(reversed(range(len(x.shape))))))
    inv = tuple(perm.index(i) for i in range(len(perm)))
    return [d.emit("transpose", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], perm=inv)[0]]


@_rule("split")
def _bwd_split(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    x = op.inputs[0]
    parts = [dy if dy is not None else d.zeros_like(t) for dy, t in zip(dys, op.outputs, strict=True)]
    return [d.emit("concat", parts, f"{op.name}.bwd", op.group, out=[d.hint(x)], axis=op.attrs.get("axis", 0))[0]]


@_rule("concat")
def _bwd_concat(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    ax = int(op.attrs.get("axis", 0))
    ax = ax + len(dy.shape) if ax < 0 else ax
    hints = [d.hint(t) if t.name in d.req else None for t in op.inputs]
    if len(op.inputs) == 1:
        return [d.emit("reshape", [dy], f"{op.name}.bwd", op.group, out=hints, shape=dy.shape)[0]]
    outs = d.emit("split", [dy], f"{op.name}.bwd", op.group, out=hints, axis=ax,
                  sizes=tuple(t.shape[ax] for t in op.inputs))
    return list(outs)


@_rule("slice")
def _bwd_slice(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    diff = [i for i, (a, b) in enumerate(zip(x.shape, dy.shape, strict=True)) if a != b]
    if not diff:
        return [dy]
    if len(diff) > 1:
        raise UnsupportedOpError(f"op {op.name!r} (slice): backward of a slice along several axes {tuple(diff)}; "
                                 "expected a slice along one axis")
    ax = diff[0]
    rest = list(x.shape)
    rest[ax] = x.shape[ax] - dy.shape[ax]
    z = d.zeros_like(TensorSpec(f"{op.name}.pad", tuple(rest), dy.dtype))
    return [d.emit("concat", [dy, z], f"{op.name}.bwd", op.group, out=[d.hint(x)], axis=ax)[0]]


@_rule("reduction")
def _bwd_reduction(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    axes = op.attrs.get("axes", tuple(range(len(x.shape))))
    axes = axes if isinstance(axes, tuple) else (axes,)
    axes = {int(a) % len(x.shape) for a in axes}
    kd = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    if dy.shape != kd:
        dy = d.emit("reshape", [dy], f"{op.name}.bwd.keepdims", op.group, shape=kd)[0]
    # broadcast back over the reduced axes: a sum's or mean's gradient needs only x's shape (autograd's SumBackward0
    # and MeanBackward0 save sizes, not the input: torch's derivatives.yaml, ``sum_backward(grad, self.sym_sizes(),
    # dim, keepdim)``), so x is not kept for it; max/min read x, as their gradient needs the argmax
    if op.attrs.get("op", "sum") in ("sum", "mean"):
        return [d.emit("elementwise_bwd", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], op="identity",
                       shape=x.shape)[0]]
    return [d.emit("elementwise_bwd", [d.R(x), dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], op="max")[0]]


@_rule("expand")
def _bwd_expand(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    """A broadcast's gradient: ``dy`` summed over the broadcast axes (kept as size-1 axes)."""
    (dy,) = dys
    assert dy is not None
    x = op.inputs[0]
    pad = len(dy.shape) - len(x.shape)
    axes = tuple(i for i, n in enumerate(dy.shape) if i < pad or x.shape[i - pad] != n)
    if not axes:
        return [d.emit("reshape", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], shape=x.shape)[0]]
    return [d.emit("reduction", [dy], f"{op.name}.bwd", op.group, out=[d.hint(x)], axes=axes, op="sum",
                   keepdims=pad == 0)[0]]


@_rule("lstm", "gru", "lstm_cell", "gru_cell")
def _bwd_rnn(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    dy = next(t for t in dys if t is not None)
    hints = [d.hint(t) if t.name in d.req else None for t in op.inputs]
    outs = d.emit("rnn_bwd", [dy, *(d.R(t) for t in op.inputs)], f"{op.name}.bwd", op.group, out=hints,
                  fwd_flops=op.flops, fwd_macs=op.macs)
    return list(outs)


@_rule("moe_router")
def _bwd_router(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    dw = dys[0]
    x, w = op.inputs
    if dw is None:
        dw = d.zeros_like(op.outputs[0])
    hints = [d.hint(t) if t.name in d.req else None for t in (x, w)]
    return list(d.emit("moe_router_bwd", [d.R(x), d.R(w), dw], f"{op.name}.bwd", op.group, out=hints,
                       top_k=op.attrs.get("top_k", 1)))


@_rule("moe_dispatch")
def _bwd_dispatch(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x, idx = op.inputs
    return [d.emit("moe_dispatch_bwd", [dy, idx], f"{op.name}.bwd", op.group, out=[d.hint(x)],
                   tokens=op.attrs.get("tokens", idx.numel))[0], None]


@_rule("moe_combine")
def _bwd_combine(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    y, wts, idx = op.inputs
    hints = [d.hint(t) if t.name in d.req else None for t in (y, wts)]
    gy, gw = d.emit("moe_combine_bwd", [dy, d.R(y), d.R(wts), idx], f"{op.name}.bwd", op.group, out=hints,
                    tokens=op.attrs.get("tokens", idx.numel))
    return [gy, gw, None]


@_rule("grouped_matmul")
def _bwd_grouped(d: _Deriver, op: Op, dys: list[TensorSpec | None]) -> list[TensorSpec | None]:
    (dy,) = dys
    assert dy is not None
    x, w = op.inputs
    keys = ("tokens", "experts_active", "tile_rows", "tile_cols", "column_calls", "per_expert_streams")
    attrs = {k: op.attrs[k] for k in keys if k in op.attrs}
    need = _needs(d, op)
    gx = d.emit("grouped_matmul_bwd_data", [dy, d.R(w)], f"{op.name}.bwd_data", op.group, out=[d.hint(x)],
                **attrs)[0] if need[0] else None
    gw = d.emit("grouped_matmul_bwd_weight", [d.R(x), dy], f"{op.name}.bwd_weight", op.group, out=[d.hint(w)],
                **attrs)[0] if need[1] else None
    return [gx, gw]


# ------------------------------------------------------------------------------------------------


def _check_trainable(forward_graph: OpGraph) -> None:
    """Refuse a forward graph whose weights are all integers: no weight has a gradient, so the step derived from it
    would be the forward pass alone (its backward and update silently dropped), priced as a training step."""
    weights = {t.dtype.value for t in forward_graph.tensors.values() if t.role is Role.WEIGHT}
    if weights and not any(DType(d).is_float for d in weights):
        raise GraphError(f"training_graph: {forward_graph.name}: weights that are not floating point have no gradients; got every weight "
                         f"in {', '.join(sorted(weights))}; expected a floating-point dtype (--dtype bf16, fp16, fp32 "
                         "or fp8_e4m3; int8 GEMMs in training: --fp8-linears int8)")


def training_graph(forward_graph: OpGraph, optimizer: str = "adamw", mixed_precision: bool = True,
                   recompute: str = "none", output_copy: bool = False) -> OpGraph:
    """The training step derived from ``forward_graph`` (built with ``phase="train"``, ending in a loss).

    Parameters
    ----------
    forward_graph
        Forward pass with at least one loss op (``cross_entropy`` or ``mse_loss``).
    optimizer
        ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.
    mixed_precision
        Keep an fp32 master copy of each non-fp32 weight and fp32 moments (else moments in the
        weight's dtype and no master copy).
    recompute
        ``none``, ``selective`` (attention core), ``full`` (whole layers) or a named policy of
        :mod:`workloads.recompute` (``selective-op``, MaxText's ``minimal``, ``save_qkv_proj``, ...,
        ``custom:NAME=CHOICE,...``, Megatron-Core's ``modules:NAME,...``).
    output_copy
        With ``modules:NAME,...``: each recomputed output of a ``CheckpointWithoutOutput`` module (``layernorm``,
        ``moe_act``, ``mla_up_proj``) copied back into the forward's released storage before the backward reads it,
        one elementwise ``copy`` per output (Megatron-Core before f54403492e; :attr:`ParallelPlan.recompute_output_copy`).

    Returns
    -------
    OpGraph
        Forward ops, then backward ops (with recomputed copies), gradient accumulation and one
        ``optimizer_update`` per weight; ``meta["phase"] == "train_step"``.

    Raises
    ------
    GraphError
        When the graph has no loss op.
    UnsupportedOpError
        When an op on the gradient path has no backward rule (the message names the op and kind).
    ValueError
        For an unknown optimizer or recompute mode.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"training_graph: optimizer; got {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}"
                         f"{did_you_mean(str(optimizer), OPTIMIZERS)}")
    if recompute not in RECOMPUTE:
        from workloads.recompute import check_policy

        try:
            check_policy(recompute)
        except ValueError as exc:
            raise ValueError(f"training_graph: {exc}") from None
    _check_trainable(forward_graph)
    from workloads.recompute import needs_unfuse, unfuse_projections

    # PyTorch models run the q/k/v and gate/up projections as separate linears; a custom policy may treat
    # the parts of a fused projection differently
    if needs_unfuse(recompute):
        forward_graph = unfuse_projections(forward_graph)
    return _Deriver(forward_graph, optimizer, bool(mixed_precision), recompute, bool(output_copy)).run()


def prune_dead_recompute(g: OpGraph) -> OpGraph:
    """The training step ``g`` as a traced rematerialisation runs it: an op of another layer (or of none) reads
    a layer's saved forward tensor rather than its recomputed copy, and the recomputed ops (``NAME@recompute``)
    whose results no later op then reads, directly or through other recomputed ops, are dropped.

    A layer recomputed whole re-emits every forward op of the layer (:func:`training_graph`), but its backward
    reads only some of them: not the last projection's output (its weight gradient reads the projection's
    input, its input gradient the weight), nor what follows it to the layer's output (a sequence-parallel
    reduce-scatter, the residual add), which the next layer and the final norm read as the saved input of
    their own rematerialised block (the scan's carry: MaxText's ``decoder_layer_input``, saved under every
    policy). JAX's ``jax.checkpoint`` stages the recomputation as a jaxpr that ``remat_partial_eval``
    dead-code-eliminates to the residuals the backward uses ('DCE jaxpr_staged, keeping only instantiated
    outputs which are unknown': ``pe.dce_jaxpr``, jax/_src/ad_checkpoint.py at jax-ml/jax 732fd15, Dec 2023, and
    since); the SPMD partitioner, which runs after, never sees the dropped ops, so it adds no collective for them
    (a tensor-parallel reduce-scatter after the last projection), and a MaxText step never runs them. Eager re-runs are not pruned: Megatron's ``tensor_parallel.checkpoint``
    recomputes the whole forward of the layer and backpropagates from its outputs.

    >>> from workloads.zoo.transformer import train_forward, zoo_config
    >>> step = training_graph(train_forward(zoo_config("gpt2-small"), batch=1, seq_len=8), recompute="full")
    >>> pruned = prune_dead_recompute(step)
    >>> sorted({op.name for op in step.ops} - {op.name for op in pruned.ops})[:3]
    ['layers.0.mlp.down@recompute', 'layers.0.mlp_residual@recompute', 'layers.1.mlp.down@recompute']
    """
    layer_of = {t.name: _layer_key(op.group) for op in g.ops if "@recompute" in op.name for t in op.outputs}
    ops: list[Op] = []
    for op in g.ops:
        key = _layer_key(op.group)
        ins = tuple(TensorSpec(t.name.split("@recompute")[0], t.shape, t.dtype, t.role)
                    if layer_of.get(t.name, key) not in (None, key) else t for t in op.inputs)
        ops.append(op if ins == op.inputs else dataclasses.replace(op, inputs=ins))
    read: set[str] = set()
    kept: list[Op] = []
    for op in reversed(ops):
        if "@recompute" in op.name and not any(t.name in read for t in op.outputs):
            continue
        kept.append(op)
        read.update(t.name for t in op.inputs)
    if len(kept) == len(g.ops) and ops == list(g.ops):
        return g
    return OpGraph(g.name, kept[::-1], g.meta, inferred={op.name for op in kept})

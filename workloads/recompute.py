"""Activation-recomputation policies by the names the training stacks give them.

A policy decides, for every forward op of a transformer layer (a group path ending in a layer index,
``layers.3``), whether its outputs are kept for the backward pass (saved), kept in host memory
(offloaded) or recomputed from the layer's input and the saved tensors just before that layer's
backward. :func:`workloads.training.training_graph` emits the recomputed ops into the step's graph,
so their time is priced like any other op, and the backward reads their copies.

Policies (:data:`POLICIES`):

* ``none``: everything saved. ``full``: only the layer input saved (Megatron-LM
  ``--recompute-granularity full``, PyTorch's ``checkpoint`` of a whole block, MaxText ``full``).
* ``selective``: Megatron-LM's ``--recompute-granularity selective`` (Korthikanti et al. 2022,
  Sec. 4.3): the attention core (``QK^T``, softmax, dropout, ``softmax V``) is recomputed.
* ``selective-op``: torchtitan's ``selective_ac_option = "op"``
  (``torchtitan/distributed/activation_checkpoint.py``, ``_apply_op_sac``): inside each block the
  outputs of ``aten.mm`` are saved except every second one (a counter per block, in call order:
  ``wq`` saved, ``wk`` recomputed, ``wv`` saved, ``wo`` recomputed, ``w1`` saved, ``w3`` recomputed,
  ``w2`` saved), the outputs of the SDPA kernels (flash, efficient, cuDNN) and of
  ``reduce_scatter_tensor`` are saved, every other op (norms, RoPE, activations, residual adds)
  is recomputed. torchtitan's Llama runs ``wq/wk/wv`` and ``w1/w3`` as separate linears, so a
  fused projection of the zoo's graph is split into its parts first (:func:`unfuse_projections`).
* MaxText's ``remat_policy`` names (``MaxText/layers/decoders.py``, ``get_remat_policy`` and
  ``minimal_policy``; names tagged with ``checkpoint_name`` in ``layers/attentions.py`` and
  ``layers/linears.py``): ``minimal`` saves ``query_proj key_proj value_proj qkv_proj out_proj
  mlpwi mlpwi_0 mlpwi_1 mlpwo``; ``minimal_with_context`` also ``context`` (the attention output);
  ``save_dot_with_context_except_mlp`` the attention projections and ``context``;
  ``save_dot_except_mlpwi`` the attention projections and ``mlpwo``; ``save_dot_except_mlp`` the
  attention projections; ``save_qkv_proj`` the q/k/v projections; ``save_out_proj`` ``out_proj``;
  ``qkv_proj_offloaded`` and ``minimal_offloaded`` offload (``save_and_offload_only_these_names``,
  ``offload_dst="pinned_host"``) the q/k/v projections, respectively the ``minimal`` set, and save
  nothing on the device.

Ops are matched to those names by their place in the layer: a weight matmul of the attention block
is ``out_proj`` when its output feeds the residual add, a q/k/v projection otherwise; a weight matmul
of the MLP is ``mlpwo`` when it feeds the residual, ``mlpwi`` otherwise; the attention kernel's
output is ``context``.
"""

from __future__ import annotations

from collections.abc import Iterable

from workloads.ir import Op, OpGraph, Role, TensorSpec

__all__ = ["POLICIES", "MAXTEXT_SAVES", "policy_plan", "unfuse_projections", "projection_name", "layer_key"]

#: MaxText remat policy -> (names saved on the device, names offloaded to pinned host memory)
_ATTN = ("qkv_proj", "out_proj")
MAXTEXT_SAVES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "minimal": (("qkv_proj", "out_proj", "mlpwi", "mlpwo"), ()),
    "minimal_with_context": (("qkv_proj", "out_proj", "mlpwi", "mlpwo", "context"), ()),
    "save_dot_with_context_except_mlp": (("qkv_proj", "out_proj", "context"), ()),
    "save_dot_except_mlpwi": (("qkv_proj", "out_proj", "mlpwo"), ()),
    "save_dot_except_mlp": (_ATTN, ()),
    "save_qkv_proj": (("qkv_proj",), ()),
    "save_out_proj": (("out_proj",), ()),
    "qkv_proj_offloaded": ((), ("qkv_proj",)),
    "minimal_offloaded": ((), ("qkv_proj", "out_proj", "mlpwi", "mlpwo")),
}
#: Every policy name ``--recompute`` takes.
POLICIES: tuple[str, ...] = ("none", "selective", "full", "selective-op", *MAXTEXT_SAVES)


def layer_key(group: str) -> str | None:
    """The group prefix ending in its first numeric component (``layers.3.attn`` -> ``layers.3``)."""
    parts = group.split(".") if group else []
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return None


def _weighted(op: Op) -> bool:
    return op.kind in ("matmul", "grouped_matmul") and any(t.role is Role.WEIGHT for t in op.inputs[1:2])


_PASS_THROUGH = frozenset({"reshape", "all_reduce", "reduce_scatter", "all_gather", "moe_combine", "all_to_all"})


def _feeds_residual(g: OpGraph, op: Op) -> bool:
    """Whether ``op``'s output reaches a residual add (an elementwise add of the layer group)
    through views and collectives only."""
    todo = [t.name for t in op.outputs]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for c in g.consumers(name):
            if c.kind == "elementwise" and c.attrs.get("op") == "add":
                if c.name.endswith("_residual"):
                    return True
                todo += [t.name for t in c.outputs]
            elif c.kind in _PASS_THROUGH:
                todo += [t.name for t in c.outputs]
    return False


def projection_name(g: OpGraph, op: Op) -> str | None:
    """The MaxText checkpoint name of ``op`` (``qkv_proj``, ``out_proj``, ``mlpwi``, ``mlpwo``,
    ``context``) or None."""
    if op.kind == "attention":
        return "context"
    if not _weighted(op):
        return None
    block = op.group.rsplit(".", 1)[-1] if op.group else ""
    residual = _feeds_residual(g, op)
    if block.startswith("attn") or "attention" in block:
        return "out_proj" if residual else "qkv_proj"
    if block.startswith(("mlp", "moe", "ffn")) or "expert" in op.group:
        return "mlpwo" if residual else "mlpwi"
    return None


def policy_plan(g: OpGraph, policy: str) -> tuple[set[str], set[str]]:
    """(saved op names, offloaded op names) of the layers' ops under a named full-layer policy
    (``full``, ``selective-op`` or a MaxText name); every other op of a layer is recomputed."""
    saved: set[str] = set()
    offloaded: set[str] = set()
    if policy == "full":
        return saved, offloaded
    if policy == "selective-op":
        count: dict[str, int] = {}
        for op in g.ops:
            key = layer_key(op.group)
            if key is None:
                continue
            if op.kind in ("attention", "reduce_scatter"):
                saved.add(op.name)
            elif op.kind == "matmul" and _weighted(op):
                count[key] = count.get(key, 0) + 1
                if count[key] % 2 == 1:
                    saved.add(op.name)
        return saved, offloaded
    keep, off = MAXTEXT_SAVES[policy]
    for op in g.ops:
        if layer_key(op.group) is None:
            continue
        name = projection_name(g, op)
        if name in keep:
            saved.add(op.name)
        elif name in off:
            offloaded.add(op.name)
    return saved, offloaded


def _split_sizes(g: OpGraph, op: Op) -> tuple[Op, tuple[int, ...]] | None:
    """(the split, its part widths) when ``op``'s only consumer splits its last axis."""
    out = op.outputs[0]
    cons = g.consumers(out.name)
    if len(cons) != 1 or cons[0].kind != "split":
        return None
    sp = cons[0]
    axis = int(sp.attrs.get("axis", -1))
    if axis not in (-1, len(out.shape) - 1):
        return None
    return sp, tuple(int(t.shape[-1]) for t in sp.outputs)


def unfuse_projections(g: OpGraph) -> OpGraph:
    """``g`` with every fused projection of a layer (a weight matmul whose output is split along
    its last axis: ``qkv``, ``gate_up``) run as one matmul per part, as PyTorch models written with
    separate ``nn.Linear`` layers run them (torchtitan's Llama: ``wq``, ``wk``, ``wv``; ``w1``,
    ``w3``). The parts' weights partition the fused weight (the same parameters and bytes); the
    parts' outputs are the split's outputs, so every consumer is unchanged."""
    ops: list[Op] = []
    drop: set[str] = set()
    for op in g.ops:
        if op.name in drop:
            continue
        parts = _split_sizes(g, op) if _weighted(op) and op.kind == "matmul" and layer_key(op.group) else None
        if parts is None:
            ops.append(op)
            continue
        sp, widths = parts
        drop.add(sp.name)
        ops += _parts(op, sp, widths)
    return OpGraph(g.name, ops, dict(g.meta))


def _parts(op: Op, sp: Op, widths: Iterable[int]) -> list[Op]:
    x, w = op.inputs[0], op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    out: list[Op] = []
    for i, (width, y) in enumerate(zip(widths, sp.outputs, strict=True)):
        wi = TensorSpec(f"{w.name}.part{i}", (*w.shape[:-1], width), w.dtype, Role.WEIGHT)
        ins = [x, wi]
        if bias is not None:
            ins.append(TensorSpec(f"{bias.name}.part{i}", (width,), bias.dtype, Role.WEIGHT))
        out.append(Op(f"{op.name}.part{i}", op.kind, tuple(ins), (y,), op.attrs, op.group))
    return out

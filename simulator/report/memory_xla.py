"""Device memory of a training step as XLA holds it on a TPU (MaxText's layout of the train state).

XLA compiles the whole step into one program and assigns every buffer ahead of time: there is no
CUDA context, cuBLAS workspace, NCCL staging buffer or caching allocator. What a chip holds at the
step's peak, component by component (docs/training_memory.md, "XLA on TPUs"):

* the train state, sharded over the mesh axes that shard parameters (``fsdp`` and ``tensor``;
  replicated over ``data`` and the DCN axes): fp32 parameters (MaxText ``weight_dtype: float32``),
  fp32 gradients (``grad_dtype: float32``), AdamW's two moments in the parameters' dtype
  (``opt_type: adamw``, ``mu_dtype: ""`` inherits ``weight_dtype``; optax keeps ``nu`` in the
  parameters' dtype): :data:`MAXTEXT_STATE_BYTES_PER_PARAM`; the state is donated to the step
  (``donate_argnums``), so the update writes it in place;
* the activations the remat policy saves, for every layer of the scanned stack, plus the working set
  of one layer's recompute and backward (the scan body runs one layer at a time and XLA reuses its
  buffers from iteration to iteration); under tensor parallelism MaxText constrains the residual
  stream and the outputs of ``out_proj`` and ``mlpwo`` to ``activation_embed``, which its
  ``logical_axis_rules`` shard over the ``tensor`` axis, so those saved tensors are ``1/tp`` of a
  chip's share (:func:`row_parallel_stash_bytes`);
* the loss: MaxText's ``cross_entropy_with_logits`` custom VJP keeps ``exp_shifted`` (a tensor of
  the logits' size and dtype) in place of the logits for its backward, so it holds two logit-sized
  tensors at once, as the graph does (:data:`XLA_LOSS_EXTRA_LOGIT_TENSORS`; no fp32 copies, unlike
  PyTorch's eager cross entropy);
* FSDP's gathered weights: XLA all-gathers each weight array of the scanned layer over the ``fsdp``
  axis where it is used (one array at a time, the next one's gather overlapped by the latency-hiding
  scheduler) and reduce-scatters each weight gradient, in the dot's dtype, as the backward produces
  it (:func:`fsdp_gather_buffers`); the unsharded weight gradients the graph keeps until their
  accumulation are therefore not held (:func:`xla_peak_activation_bytes`);
* with ``num_vocab_tiling`` (``ParallelPlan.loss_chunks``), one chunk of the logits at a time and the
  LM head's gathered table with its gradient accumulator (:func:`xla_chunked_loss_bytes`); with
  ``weight_dtype: bfloat16`` (``ParallelPlan.param_dtype``), a bf16 train state
  (:data:`MAXTEXT_BF16_STATE_BYTES_PER_PARAM`);
* the runtime's reservation: ``memory.hbm.reserved_bytes`` of the TPU's catalog entry (the
  compiler's HBM limit is ``capacity_bytes - reserved_bytes``; OpenXLA error code E1000: "System
  overhead: a small portion of memory is reserved for XLA Runtime internals").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from workloads.ir import Op, OpGraph, Role

__all__ = ["MAXTEXT_STATE_BYTES_PER_PARAM", "XLA_LOSS_EXTRA_LOGIT_TENSORS", "XLA_GATHERED_WEIGHTS_IN_FLIGHT",
           "ROW_PARALLEL_NAMES", "SPLIT_WEIGHT_KINDS", "maxtext_state_bytes", "fsdp_gather_buffers", "row_parallel_stash_bytes",
           "xla_loss_extra_bytes", "xla_peak_activation_bytes", "xla_peak_by_phase", "xla_chunked_loss_bytes",
           "MAXTEXT_BF16_STATE_BYTES_PER_PARAM", "PARAM_DTYPE_BYTES"]

#: Bytes per parameter of MaxText's train state (AI-Hypercomputer/maxtext
#: src/maxtext/configs/base.yml @ e591f30cbbf217ed67ef71263ec0538239f9c3b8: ``weight_dtype: "float32"``,
#: ``grad_dtype: "float32"``, ``opt_type: "adamw"``, ``mu_dtype: ""`` "Inherits from weight_dtype if
#: unset", "nu_dtype is always inherited from weights"; at 76bd53b0f (2023-12) the parameters are flax's
#: default float32 and the optimizer is ``optax.adamw`` without ``mu_dtype``, MaxText/maxtext_utils.py
#: ``get_optimizer``).
MAXTEXT_STATE_BYTES_PER_PARAM: dict[str, float] = {"parameters": 4.0, "gradients": 4.0, "optimizer": 8.0}
#: The same with ``weight_dtype: bfloat16`` (``ParallelPlan.param_dtype`` ``bf16``): the parameters in bf16,
#: their gradients too (``jax.grad`` returns the parameters' dtype; base.yml has no ``grad_dtype`` at
#: 9f1820b47 or 449b4fe52, the tpu-recipes-v0.1.4 and Mixtral 8x22B configs), AdamW's ``mu`` inheriting
#: ``weight_dtype`` (``mu_dtype: ""``, base.yml @ 9f1820b47) and ``nu`` in the parameters' dtype.
MAXTEXT_BF16_STATE_BYTES_PER_PARAM: dict[str, float] = {"parameters": 2.0, "gradients": 2.0, "optimizer": 4.0}
#: Parameter bytes per ``ParallelPlan.param_dtype`` ('' is MaxText's default float32).
PARAM_DTYPE_BYTES: dict[str, float] = {"": 4.0, "fp32": 4.0, "bf16": 2.0}
#: Logit-sized tensors MaxText's loss holds beyond the two the graph holds at its loss (the logits and
#: their gradient). ``_cross_entropy_with_logits_fwd`` (MaxText/max_utils.py @ 76bd53b0f; unchanged in
#: src/maxtext/utils/max_utils.py @ e591f30) keeps ``exp_shifted`` (the logits' size and dtype) for the
#: backward; the logits themselves are dead once it is computed (the backward reads only their dtype),
#: the one-hot targets are an iota compare XLA fuses into their consumers, and the backward turns
#: ``exp_shifted`` into the logits' gradient: two logit-sized tensors at once, forward and backward.
XLA_LOSS_EXTRA_LOGIT_TENSORS = 0
#: Gathered weight arrays of the scanned layer live at once: the one a dot reads and the next one,
#: whose asynchronous all-gather the latency-hiding scheduler overlaps with that dot.
XLA_GATHERED_WEIGHTS_IN_FLIGHT = 2
#: Op kinds whose weight, when the op's output is split along its last axis, MaxText holds as one array
#: per part: dense projections (``fused_qkv`` / ``fused_mlp`` false) and the MoE experts' gate and up
#: projections, which ``RoutedMoE`` creates as two parameters ``wi_0`` and ``wi_1`` of shape
#: ``(num_experts, emb_dim, mlp_dim)`` beside ``wo`` (MaxText/layers/moe.py @ 14b5876ea, ``wi_0`` / ``wi_1`` /
#: ``wo`` kernels; src/MaxText/layers/moe.py @ 3eb77db3c, ``self.wi_0`` / ``self.wi_1`` ``nnx.Param``).
SPLIT_WEIGHT_KINDS = frozenset({"matmul", "grouped_matmul"})
#: MaxText checkpoint names whose outputs its logical axis rules shard over the ``tensor`` axis on the
#: embedding dimension (``activation_embed: tensor`` in base.yml @ 76bd53b0f).
ROW_PARALLEL_NAMES = frozenset({"out_proj", "mlpwo"})


def maxtext_state_bytes(n_params: float, shard: int, param_dtype: str = "") -> dict[str, float]:
    """Parameters, gradients and optimizer state of one chip: ``n_params`` parameters (the chip's
    tensor-parallel share) sharded ``shard`` ways (:data:`MAXTEXT_STATE_BYTES_PER_PARAM`; with
    ``param_dtype`` ``bf16``, :data:`MAXTEXT_BF16_STATE_BYTES_PER_PARAM`).

    >>> maxtext_state_bytes(1e9, 4)["optimizer"]
    2000000000.0
    >>> maxtext_state_bytes(1e9, 4, "bf16")["optimizer"]
    1000000000.0
    """
    s = float(max(1, shard))
    per = MAXTEXT_BF16_STATE_BYTES_PER_PARAM if param_dtype == "bf16" else MAXTEXT_STATE_BYTES_PER_PARAM
    return {k: v * n_params / s for k, v in per.items()}


def _layer_weights(g: OpGraph) -> list[float]:
    """Bytes of each weight array of the layers (``layers.N``) as MaxText holds them, largest first:
    a fused projection of the graph (``qkv``, ``gate_up``, the experts' ``w_in``: a weight matmul
    or grouped matmul whose output is split along its last axis) counts as its parts, as MaxText's
    ``fused_qkv: false`` and ``fused_mlp: false`` (base.yml @ e591f30) keep one array per projection
    (``query``, ``key``, ``value``; ``wi_0``, ``wi_1``) and its MoE block one array per expert
    projection (:data:`SPLIT_WEIGHT_KINDS`)."""
    return g.memo("xla_layer_weights", lambda: _layer_weights_walk(g))


def _layer_weights_walk(g: OpGraph) -> list[float]:
    from workloads.recompute import layer_key

    seen: dict[str, list[float]] = {}
    for op in g.ops:
        if layer_key(op.group) is None:
            continue
        for i, t in enumerate(op.inputs):
            if t.role is not Role.WEIGHT or t.name in seen or g.producer(t.name) is not None:
                continue
            widths = _split_widths(g, op) if i == 1 and op.kind in SPLIT_WEIGHT_KINDS else (1,)
            seen[t.name] = [float(t.nbytes) * w / sum(widths) for w in widths]
    return sorted((b for sizes in seen.values() for b in sizes), reverse=True)


def _split_widths(g: OpGraph, op: Op) -> tuple[int, ...]:
    """The part widths when ``op``'s only consumer splits its output's last axis, else ``(1,)``."""
    out = op.outputs[0]
    cons = g.consumers(out.name)
    if len(cons) != 1 or cons[0].kind != "split" or int(cons[0].attrs.get("axis", -1)) not in (-1, len(out.shape) - 1):
        return (1,)
    return tuple(int(t.shape[-1]) for t in cons[0].outputs)


def fsdp_gather_buffers(graphs: Iterable[OpGraph], shard: int) -> dict[str, float]:
    """FSDP's unsharded buffers of a scanned layer, in the compute dtype of the graph's weights:
    :data:`XLA_GATHERED_WEIGHTS_IN_FLIGHT` gathered weight arrays (the largest) and the largest
    weight's unsharded gradient before its reduce-scatter. The gradient is the weight-gradient dot's
    output, in the dot's dtype: the SPMD partitioner propagates the sharded fp32 gradient's sharding
    back through the elementwise convert to the dot and reduce-scatters the dot's partial sums there,
    so the fp32 copy only exists sharded. Zero when nothing is sharded (``shard`` 1)."""
    if shard <= 1:
        return {"xla_gathered_weights": 0.0, "xla_gradient_reduce_scatter": 0.0}
    sizes = sorted((w for g in graphs for w in _layer_weights(g)), reverse=True)
    return {"xla_gathered_weights": sum(sizes[:XLA_GATHERED_WEIGHTS_IN_FLIGHT]),
            "xla_gradient_reduce_scatter": sizes[0] if sizes else 0.0}


def row_parallel_stash_bytes(g: OpGraph, kept: Mapping[str, float]) -> tuple[float, float]:
    """(``out_proj`` bytes, ``mlpwo`` bytes) among the stashed tensors ``kept`` (name -> bytes, the
    forward tensors the backward pass reads) of the graph's layers.

    MaxText shards both over the ``tensor`` axis (:data:`ROW_PARALLEL_NAMES`); the graph's copies are
    unsharded (a reduce-scatter's output kept in a projection's place is already sharded: only the ``mlpwo``
    rule applies to it). An ``mlpwo`` output is counted only where the residual add it feeds is kept too: JAX
    saves a value only if the backward pass needs it (a residual of the linearisation), and nothing in
    the backward reads ``mlpwo``'s output once the layer's output, the next layer's saved input
    (the scan's carry), is kept; the graph re-runs that add in its recomputation and so keeps both."""
    from workloads.recompute import projection_name

    out = wo = 0.0
    for name, size in kept.items():
        op = g.producer(name)
        reduced = op is not None and op.kind == "reduce_scatter"
        src = _scattered_source(g, op) if reduced else op
        if src is None:
            continue
        proj = projection_name(g, src)
        if proj == "out_proj" and not reduced:
            out += size
        elif proj == "mlpwo" and _feeds_kept_residual(g, name, kept):
            wo += size
    return out, wo


def _scattered_source(g: OpGraph, rs: Op) -> Op | None:
    """The op whose output a reduce-scatter reduces, through reshapes: a policy keeps a tensor-parallel
    projection's reduced output in its place (:func:`workloads.recompute.at_reduction`), already ``1/tp``."""
    op = g.producer(rs.inputs[0].name)
    while op is not None and op.kind == "reshape":
        op = g.producer(op.inputs[0].name)
    return op


def _feeds_kept_residual(g: OpGraph, name: str, kept: Mapping[str, float]) -> bool:
    todo, seen = [name], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for c in g.consumers(t):
            if c.kind == "elementwise" and c.name.endswith("_residual"):
                if any(o.name in kept for o in c.outputs):
                    return True
            elif c.kind in ("reshape", "reduce_scatter", "all_reduce") or (
                    c.kind == "elementwise" and c.attrs.get("op") == "add"):  # collectives, views, the bias
                todo += [o.name for o in c.outputs]
    return False


def xla_loss_extra_bytes(g: OpGraph) -> dict[str, float]:
    """Op name -> bytes MaxText's loss holds over the graph's logits and their gradient while the
    loss's backward runs: :data:`XLA_LOSS_EXTRA_LOGIT_TENSORS` tensors of the logits' size and dtype."""
    from workloads.training import LOSS_KINDS

    for op in g.ops:
        if op.kind == "cross_entropy" and XLA_LOSS_EXTRA_LOGIT_TENSORS:
            size = float(XLA_LOSS_EXTRA_LOGIT_TENSORS * op.inputs[0].nbytes)
            return {o.name: size for o in g.ops if o.kind == LOSS_KINDS["cross_entropy"]}
    return {}


def _logit_live_bytes(g: OpGraph) -> tuple[dict[str, float], float]:
    """(op name -> bytes of logit-sized activations live while it runs, the LM head weight's element
    count): the tensors of the cross entropy's input size that the LM head (or its recomputation) produces
    and those computed from them (the loss's, the logits' gradient) until the head's backward, a view counted once with its
    base (as :func:`~simulator.report.memory.peak_activation_bytes` does). A layer's tensor of the same
    size (an MLP as wide as the vocabulary, MaxText's 2023 models: 32768 both) is none of them."""
    from workloads.analysis import INPLACE_KINDS, VIEW_KINDS

    ce = next((op for op in g.ops if op.kind == "cross_entropy"), None)
    if ce is None:
        return {}, 0.0
    numel = ce.inputs[0].numel
    views = VIEW_KINDS | INPLACE_KINDS
    base = _view_bases(g, views)
    head = g.producer(base.get(ce.inputs[0].name, ce.inputs[0].name))
    weight = next((t for t in head.inputs if t.role is Role.WEIGHT), None) if head is not None else None
    span: dict[str, list[int]] = {}
    size: dict[str, float] = {}
    for i, op in enumerate(g.ops):
        read = {base.get(t.name, t.name) for t in op.inputs} & span.keys()
        for r in read:
            span[r][1] = i
        produces = op is head or (weight is not None and weight in op.inputs)  # the head, or its recomputation
        if op.kind in views or not (produces or read):
            continue
        for t in op.outputs:
            if t.role is Role.ACTIVATION and t.numel == numel:
                span[t.name], size[t.name] = [i, i], float(t.nbytes)
    live = {op.name: sum(size[r] for r, (a, b) in span.items() if a <= i <= b) for i, op in enumerate(g.ops)}
    return {k: v for k, v in live.items() if v > 0}, float(weight.numel) if weight is not None else 0.0


def _view_bases(g: OpGraph, kinds: frozenset[str] | set[str]) -> dict[str, str]:
    """Output name of every view or in-place op of ``g`` (``kinds``) -> the tensor it aliases, resolved to
    the first non-view base."""
    base: dict[str, str] = {}
    for op in g.ops:
        if op.kind in kinds and op.inputs:
            src = base.get(op.inputs[0].name, op.inputs[0].name)
            base.update({t.name: src for t in op.outputs})
    return base


def xla_chunked_loss_bytes(g: OpGraph, chunks: int, param_bytes: float = 4.0) -> dict[str, float]:
    """Op name -> bytes MaxText's vocab-tiled loss (``num_vocab_tiling`` = ``chunks`` > 1) changes over the
    graph's whole-logits loss, at every op a logit-sized tensor is live: one chunk of each such tensor
    instead of the whole (``- (1 - 1/chunks)`` of them), plus the LM head's table gathered over the FSDP
    axis in the parameters' dtype and its gradient accumulator of the same size (``param_bytes`` per
    element each).

    Source: ``get_vocab_tiling_loss_linen`` (src/MaxText/maxtext_utils.py @ 50bafeb98, the Gemma 3
    workloads' commit): the hidden states are reshaped to ``(num_vocab_tiling, tokens / num_vocab_tiling,
    emb)`` and a ``jax.lax.scan`` computes each chunk's logits and cross entropy, forward and, under its
    ``custom_vjp``, again in the backward; the residuals keep ``gathered_params``
    (``all_gather_over_fsdp`` of the parameters; XLA keeps only the table the logits read) and the
    backward scan carries ``grad_params_acc``, the gradient of the gathered parameters."""
    if chunks <= 1:
        return {}
    live, table = _logit_live_bytes(g)
    held = 2.0 * table * param_bytes
    return {name: held - (1.0 - 1.0 / chunks) * b for name, b in live.items()}


def xla_peak_activation_bytes(g: OpGraph, loss_chunks: int = 1, param_bytes: float = 4.0,
                              at: Callable[[Op], bool] | None = None) -> float:
    """Peak live activation bytes of a training step's graph as XLA holds them: the graph's peak
    (:func:`~simulator.report.memory.peak_activation_bytes`, inputs live from first use) with MaxText's
    loss residual during the loss's backward (:func:`xla_loss_extra_bytes`), the vocab-tiled loss of
    ``loss_chunks`` chunks (:func:`xla_chunked_loss_bytes`, parameters of ``param_bytes``), and every
    weight's unsharded gradient (``grad:<weight>``) live only where it is produced: XLA reduce-scatters
    it into the sharded gradients (its unsharded buffer is :func:`fsdp_gather_buffers`'s)."""
    from simulator.report.memory import peak_activation_bytes

    weights = {name for name, t in g.tensors.items() if t.role is Role.WEIGHT}

    def weight_grad(name: str) -> bool:
        return name.startswith("grad:") and name[5:].split("@")[0] in weights

    extra = dict(xla_loss_extra_bytes(g))
    for name, b in xla_chunked_loss_bytes(g, loss_chunks, param_bytes).items():
        extra[name] = extra.get(name, 0.0) + b
    return float(peak_activation_bytes(g, inputs_from_first_use=True, extra=extra, transient=weight_grad, at=at))


def xla_peak_by_phase(g: OpGraph, loss_chunks: int = 1, param_bytes: float = 4.0) -> tuple[float, float]:
    """(peak over the ops of the scanned layers, peak over the other ops) of
    :func:`xla_peak_activation_bytes`: the step's peak as XLA's heap holds it is the larger of the first
    plus the scanned layer's FSDP buffers (:func:`fsdp_gather_buffers`) and the second alone.

    The layers run inside the scan's while loop; the gathered weights and the unsharded weight gradient
    are temporaries of the loop body, and XLA's buffer assignment gives a body's temporaries live ranges
    inside the loop's span of one flattened schedule ("computes live range of the output buffers of HLOs
    and their interference by flattening all computations", xla/hlo/utils/hlo_live_range.h at
    tensorflow/tensorflow 091a5e5), so they are not live while the loss and its backward run (there the
    vocab-tiled loss's gathered table and its gradient are: :func:`xla_chunked_loss_bytes`)."""
    from workloads.recompute import layer_key

    def inside(op: Op) -> bool:
        return layer_key(op.group) is not None

    return (xla_peak_activation_bytes(g, loss_chunks, param_bytes, at=inside),
            xla_peak_activation_bytes(g, loss_chunks, param_bytes, at=lambda op: not inside(op)))

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
  the logits' size and dtype) for its backward, over the logits and their gradient the graph holds
  (:data:`XLA_LOSS_EXTRA_LOGIT_TENSORS`);
* FSDP's gathered weights: XLA all-gathers each weight array of the scanned layer over the ``fsdp``
  axis where it is used (one array at a time, the next one's gather overlapped by the latency-hiding
  scheduler) and reduce-scatters each weight gradient as the backward produces it
  (:func:`fsdp_gather_buffers`);
* the runtime's reservation: ``memory.hbm.reserved_bytes`` of the TPU's catalog entry (the
  compiler's HBM limit is ``capacity_bytes - reserved_bytes``; OpenXLA error code E1000: "System
  overhead: a small portion of memory is reserved for XLA Runtime internals").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from workloads.ir import OpGraph, Role

__all__ = ["MAXTEXT_STATE_BYTES_PER_PARAM", "XLA_LOSS_EXTRA_LOGIT_TENSORS", "XLA_GATHERED_WEIGHTS_IN_FLIGHT",
           "ROW_PARALLEL_NAMES", "maxtext_state_bytes", "fsdp_gather_buffers", "row_parallel_stash_bytes",
           "xla_loss_extra_bytes"]

#: Bytes per parameter of MaxText's train state (AI-Hypercomputer/maxtext
#: src/maxtext/configs/base.yml @ e591f30cbbf217ed67ef71263ec0538239f9c3b8: ``weight_dtype: "float32"``,
#: ``grad_dtype: "float32"``, ``opt_type: "adamw"``, ``mu_dtype: ""`` "Inherits from weight_dtype if
#: unset", "nu_dtype is always inherited from weights"; at 76bd53b0f (2023-12) the parameters are flax's
#: default float32 and the optimizer is ``optax.adamw`` without ``mu_dtype``, MaxText/maxtext_utils.py
#: ``get_optimizer``).
MAXTEXT_STATE_BYTES_PER_PARAM: dict[str, float] = {"parameters": 4.0, "gradients": 4.0, "optimizer": 8.0}
#: Logit-sized tensors MaxText's loss keeps over the logits and their gradient: ``exp_shifted`` of
#: ``_cross_entropy_with_logits_fwd``'s residuals (MaxText/max_utils.py @ 76bd53b0f). The other
#: residuals are the logits themselves, the one-hot targets (an iota compare XLA fuses into its
#: consumers) and ``log_softmax`` (read only by the targets' gradient, which nothing uses).
XLA_LOSS_EXTRA_LOGIT_TENSORS = 1
#: Gathered weight arrays of the scanned layer live at once: the one a dot reads and the next one,
#: whose asynchronous all-gather the latency-hiding scheduler overlaps with that dot.
XLA_GATHERED_WEIGHTS_IN_FLIGHT = 2
#: MaxText checkpoint names whose outputs its logical axis rules shard over the ``tensor`` axis on the
#: embedding dimension (``activation_embed: tensor`` in base.yml @ 76bd53b0f).
ROW_PARALLEL_NAMES = frozenset({"out_proj", "mlpwo"})


def maxtext_state_bytes(n_params: float, shard: int) -> dict[str, float]:
    """Parameters, gradients and optimizer state of one chip: ``n_params`` parameters (the chip's
    tensor-parallel share) sharded ``shard`` ways (:data:`MAXTEXT_STATE_BYTES_PER_PARAM`).

    >>> maxtext_state_bytes(1e9, 4)["optimizer"]
    2000000000.0
    """
    s = float(max(1, shard))
    return {k: v * n_params / s for k, v in MAXTEXT_STATE_BYTES_PER_PARAM.items()}


def _layer_weights(g: OpGraph) -> list[float]:
    """Bytes of each distinct weight tensor no op produces, read by an op of a layer (``layers.N``)."""
    from workloads.recompute import layer_key

    seen: dict[str, float] = {}
    for op in g.ops:
        if layer_key(op.group) is None:
            continue
        for t in op.inputs:
            if t.role is Role.WEIGHT and t.name not in seen and g.producer(t.name) is None:
                seen[t.name] = float(t.nbytes)
    return sorted(seen.values(), reverse=True)


def fsdp_gather_buffers(graphs: Iterable[OpGraph], shard: int) -> dict[str, float]:
    """FSDP's unsharded buffers of a scanned layer: :data:`XLA_GATHERED_WEIGHTS_IN_FLIGHT` gathered
    weight arrays (the largest, in the compute dtype) and the largest weight's unsharded gradient
    before its reduce-scatter (fp32, ``grad_dtype``). None when nothing is sharded (``shard`` 1)."""
    if shard <= 1:
        return {"xla_gathered_weights": 0.0, "xla_gradient_reduce_scatter": 0.0}
    sizes = sorted((w for g in graphs for w in _layer_weights(g)), reverse=True)
    gathered = sum(sizes[:XLA_GATHERED_WEIGHTS_IN_FLIGHT])
    itemsize = _weight_itemsize(graphs)
    grad = sizes[0] / itemsize * MAXTEXT_STATE_BYTES_PER_PARAM["gradients"] if sizes else 0.0
    return {"xla_gathered_weights": gathered, "xla_gradient_reduce_scatter": grad}


def _weight_itemsize(graphs: Iterable[OpGraph]) -> float:
    for g in graphs:
        for t in g.tensors.values():
            if t.role is Role.WEIGHT and t.dtype.is_float:
                return float(t.nbytes) / max(1, t.numel)
    return 2.0


def row_parallel_stash_bytes(g: OpGraph, kept: Mapping[str, float]) -> float:
    """Bytes of the stashed tensors ``kept`` (name -> bytes, the backward pass's reads of the forward
    pass) produced by the layers' ``out_proj`` and ``mlpwo`` matmuls (:data:`ROW_PARALLEL_NAMES`):
    the tensors MaxText shards over the ``tensor`` axis, whose graph copies are unsharded."""
    from workloads.recompute import projection_name

    total = 0.0
    for name, size in kept.items():
        op = g.producer(name)
        if op is not None and projection_name(g, op) in ROW_PARALLEL_NAMES:
            total += size
    return total


def xla_loss_extra_bytes(g: OpGraph) -> float:
    """Bytes MaxText's loss holds at its backward over the graph's logits and their gradient:
    :data:`XLA_LOSS_EXTRA_LOGIT_TENSORS` tensors of the logits' size and dtype."""
    for op in g.ops:
        if op.kind == "cross_entropy":
            return float(XLA_LOSS_EXTRA_LOGIT_TENSORS * op.inputs[0].nbytes)
    return 0.0

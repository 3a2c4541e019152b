"""Second-order optimizer steps: appends Shampoo or SOAP preconditioner work to a training-step graph.

:func:`second_order_graph` takes a graph from :func:`workloads.training.training_graph` and, for every
weight of rank >= 2 (flattened to a matrix ``m x n`` = leading dims x last dim), appends the
preconditioner work of one optimizer step, in blocks of at most ``block x block`` (the blocked
preconditioning of Anil et al. 2020, s.4.2: a matrix is split into ``ceil(m/block) x ceil(n/block)``
blocks, each with its own statistics, batched here as one op per weight):

* **Shampoo** (Gupta, Koren & Singer, "Shampoo: Preconditioned Stochastic Tensor Optimization",
  ICML 2018, Alg. 1; Anil et al., "Scalable Second Order Optimization for Deep Learning",
  arXiv:2002.09018, 2020): the statistics ``L += G G^T`` and ``R += G^T G`` (two Gram GEMMs and two
  adds every step), the inverse roots ``L^(-1/4)``, ``R^(-1/4)`` (two ``matrix_inverse_root`` ops,
  recomputed every ``every`` steps: their ``every`` attribute amortises them) and the preconditioned
  gradient ``L^(-1/4) G R^(-1/4)`` (two GEMMs);
* **SOAP** (Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam", arXiv:2409.11321,
  2024, Alg. 3): the same statistics, their eigenbases ``Q_L``, ``Q_R`` refreshed every ``every``
  steps (two ``eigh`` ops with vectors, amortised; the paper's later refreshes use one power-iteration
  step and a QR, which costs less, so this is an upper bound), the gradient rotated into the eigenbasis
  ``Q_L^T G Q_R`` and the update rotated back ``Q_L U Q_R^T`` (four GEMMs); the Adam update in the
  rotated basis is the graph's existing ``optimizer_update``.

Statistics, roots and eigenbases are fp32 tensors (role ``optimizer_state``); the existing
element-wise optimizer op of each weight is kept (Shampoo grafts its step size from it). A blocked
gradient (more than one block) enters as a graph input ``<gradient>.blocks`` of shape
``(blocks, bm, bn)``: the blocks are a padded view of the gradient and no copy is costed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from workloads.dtypes import DType
from workloads.ir import GraphError, Op, OpGraph, Role, TensorSpec
from workloads.semantics import semantics_of

__all__ = ["second_order_graph", "SECOND_ORDER_OPTIMIZERS"]

SECOND_ORDER_OPTIMIZERS: tuple[str, ...] = ("shampoo", "soap")


def second_order_graph(train: OpGraph, optimizer: str = "shampoo", *, every: int = 10, block: int = 1024,
                       root_method: str = "eigh", iterations: int | None = None) -> OpGraph:
    """``train`` with the preconditioner work of ``optimizer`` appended for each matrix-shaped weight.

    Parameters
    ----------
    train
        A training-step graph (with one ``optimizer_update`` op per weight).
    optimizer
        ``"shampoo"`` or ``"soap"``.
    every
        Steps between preconditioner refreshes (inverse roots / eigenbases), >= 1.
    block
        Largest preconditioner side; larger dimensions are split into blocks.
    root_method, iterations
        Shampoo's inverse-root method: ``"eigh"`` or ``"newton"`` (coupled Newton, ``iterations`` steps).

    Raises
    ------
    GraphError
        Unknown optimizer, bad ``every``/``block``, or a graph without ``optimizer_update`` ops.
    """
    where = f"graph {train.name!r}: second-order optimizer"
    if optimizer not in SECOND_ORDER_OPTIMIZERS:
        from nodeperf.suggest import did_you_mean

        raise GraphError(f"{where}: unknown optimizer; got {optimizer!r}; expected one of "
                         f"{', '.join(SECOND_ORDER_OPTIMIZERS)}{did_you_mean(optimizer, SECOND_ORDER_OPTIMIZERS)}")
    for key, v in (("every", every), ("block", block)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise GraphError(f"{where}: {key}; got {v!r}; expected a positive integer")
    updates = [op for op in train if op.kind == "optimizer_update"]
    if not updates:
        raise GraphError(f"{where}: no optimizer_update ops; got a graph with phase "
                         f"{train.meta.get('phase', 'unknown')!r}; expected a training-step graph (training_graph)")
    new: list[Op] = []
    names = {op.name for op in train}
    matrices = 0
    for up in updates:
        w, g = up.inputs[0], up.inputs[1]
        if len(w.shape) < 2 or g.shape != w.shape:
            continue  # vectors and sparse (embedding-row) gradients keep the element-wise optimizer only
        matrices += 1
        m, n = math.prod(w.shape[:-1]), w.shape[-1]
        new += _preconditioner(g, m, n, optimizer, every, block, root_method, iterations, f"optimizer.{w.name}", names)
    meta = dict(train.meta)
    meta.update({"second_order": optimizer, "preconditioner_every": every, "preconditioner_block": block,
                 "preconditioned_weights": matrices})
    return OpGraph(train.name, list(train.ops) + new, meta)


def _preconditioner(g: TensorSpec, m: int, n: int, optimizer: str, every: int, block: int, root_method: str,
                    iterations: int | None, group: str, names: set[str]) -> list[Op]:
    ops: list[Op] = []
    bm, bn = min(m, block), min(n, block)
    blocks = math.ceil(m / bm) * math.ceil(n / bn)
    base = f"{group}.{optimizer}"

    def emit(kind: str, inputs: Sequence[TensorSpec], name: str, out_role: Role = Role.ACTIVATION,
             out_dtype: DType | None = None, **attrs: Any) -> tuple[TensorSpec, ...]:
        from workloads.ir import Attrs

        opname = f"{base}.{name}"
        while opname in names:
            opname += "_"
        names.add(opname)
        a = Attrs(attrs)
        try:
            outs = semantics_of(kind).infer(tuple(inputs), a)
        except GraphError as exc:
            raise GraphError(f"op {opname!r} ({kind}): {exc}") from None
        specs = tuple(TensorSpec(opname if len(outs) == 1 else f"{opname}:{i}", tuple(s), out_dtype or dt or g.dtype,
                                 out_role) for i, (s, dt) in enumerate(outs))
        ops.append(Op(opname, kind, tuple(inputs), specs, a, group))
        return specs

    if blocks == 1:
        (gb,) = emit("reshape", [g], "grad2d", shape=(m, n))
        gf = TensorSpec(gb.name, gb.shape, gb.dtype, gb.role)
        lead: tuple[int, ...] = ()
    else:
        gf = TensorSpec(f"{g.name}.blocks", (blocks, bm, bn), g.dtype, Role.ACTIVATION)
        lead = (blocks,)
    fp32 = DType.FP32
    (gl,) = emit("matmul", [gf, gf], "gram_l", out_dtype=fp32, transpose_b=True)
    (gr,) = emit("matmul", [gf, gf], "gram_r", out_dtype=fp32, transpose_a=True)
    l_state = TensorSpec(f"{group}.{optimizer}.L", (*lead, bm, bm), fp32, Role.OPTIMIZER_STATE)
    r_state = TensorSpec(f"{group}.{optimizer}.R", (*lead, bn, bn), fp32, Role.OPTIMIZER_STATE)
    (lacc,) = emit("elementwise", [l_state, gl], "stat_l", out_role=Role.OPTIMIZER_STATE, op="add")
    (racc,) = emit("elementwise", [r_state, gr], "stat_r", out_role=Role.OPTIMIZER_STATE, op="add")
    if optimizer == "shampoo":
        root = {"p": 4, "method": root_method, "every": every}
        if root_method == "newton":
            root["iterations"] = iterations
        (pl,) = emit("matrix_inverse_root", [lacc], "root_l", out_role=Role.OPTIMIZER_STATE, **root)
        (pr,) = emit("matrix_inverse_root", [racc], "root_r", out_role=Role.OPTIMIZER_STATE, **root)
        (t,) = emit("matmul", [pl, gf], "precondition_l")
        emit("matmul", [t, pr], "precondition_r")
    else:
        _, ql = emit("eigh", [lacc], "eigenbasis_l", out_role=Role.OPTIMIZER_STATE, vectors=True, every=every)
        _, qr = emit("eigh", [racc], "eigenbasis_r", out_role=Role.OPTIMIZER_STATE, vectors=True, every=every)
        (t,) = emit("matmul", [ql, gf], "rotate_in_l", transpose_a=True)
        (rot,) = emit("matmul", [t, qr], "rotate_in_r")
        (u,) = emit("matmul", [ql, rot], "rotate_out_l")
        emit("matmul", [u, qr], "rotate_out_r", transpose_b=True)
    return ops

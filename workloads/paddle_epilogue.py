"""PaddlePaddle's ``fuse_gemm_epilogue`` build pass in a training program: the GELU and its gradient in the GEMMs.

Under ``--amp`` DeepLearningExamples' PaddlePaddle BERT sets ``build_strategy.fuse_gemm_epilogue``
(``program.py`` ``create_strategy`` @ a5388a4), and ``FuseGemmEpiloguePass::ApplyImpl`` runs
``FuseLinearActFwd`` for ``gelu`` and ``FuseLinearActBwd`` for ``gelu_grad`` besides the bias folds
(:data:`PADDLE_GEMM_EPILOGUE_SOURCE`):

* forward: a ``paddle.nn.Linear`` followed by ``gelu`` becomes one ``fused_gemm_epilogue`` op with
  ``activation = "gelu"``, run as one cuBLASLt matmul with the ``CUBLASLT_EPILOGUE_GELU_AUX_BIAS`` epilogue, whose
  auxiliary output (``ReserveSpace``) holds the pre-activation for the backward; in training the pass requires the
  weight's output width to be a multiple of 8;
* backward: the ``gelu_grad`` that reads the next linear layer's input gradient is folded into that layer's
  ``fused_gemm_epilogue_grad`` (``activation_grad = "gelu_grad"``): its dX matmul applies the GELU derivative in its
  epilogue, reading ``ReserveSpace``.

:func:`fold_gelu_into_gemms` rewrites a training graph so: the GELU's forward op goes, its input GEMM writes the
activation, and the GELU's backward op goes, the GEMM that made the activation's gradient writing the
pre-activation's. Not represented: the auxiliary tensor itself (the pre-activation written by the forward GEMM and
read by the backward one, fp16, the size of the activation), which the rewrite leaves out of both GEMMs' traffic;
those GEMMs are compute-bound at BERT's shapes. The pass's other backward folds (each bias gradient in the dW GEMM's
``BGRADB`` epilogue) are not rewritten here.
"""

from __future__ import annotations

from typing import Any

#: Where the pass and the kernels it leaves are read.
PADDLE_GEMM_EPILOGUE_SOURCE = (
    "PaddlePaddle/Paddle paddle/fluid/framework/ir/fuse_gemm_epilogue_pass.cc (FuseGemmEpiloguePass::ApplyImpl: "
    "FuseLinearActFwd(graph, {\"relu\", \"gelu\"}, ...) and FuseLinearActFwd(graph, {\"gelu\"}, true, false, ...), "
    "in training only where the weight's width is a multiple of 8 for gelu, recording a ReserveSpace output; "
    "FuseLinearActBwd(graph, {\"gelu_grad\"}, false, ...) folding the gelu_grad after a linear's dX), "
    "paddle/fluid/operators/fused/fused_gemm_epilogue_op.cu (FusedGemmEpilogueKernel: "
    "CUBLASLT_EPILOGUE_GELU_AUX_BIAS with the auxiliary pointer at ReserveSpace; FusedGemmEpilogueGradKernel); "
    "NVIDIA/DeepLearningExamples PaddlePaddle/LanguageModeling/BERT/program.py @ "
    "a5388a45f71a949639b35cc5b990bd130d2d8164 (build_strategy.fuse_gemm_epilogue = True under --amp)")

#: The width a gelu GEMM's output must be a multiple of for the pass to fold it in training.
GELU_FOLD_WIDTH_MULTIPLE = 8


def fold_gelu_into_gemms(graph: Any) -> Any:
    """``graph`` (a training step) with each GELU whose input a GEMM alone makes folded into that GEMM, forward and
    backward, as PaddlePaddle's ``fuse_gemm_epilogue`` pass runs them (:data:`PADDLE_GEMM_EPILOGUE_SOURCE`). A graph
    with no such GELU is refused (a located error)."""
    from dataclasses import replace

    from workloads.ir import OpGraph

    folds = _gelu_folds(graph)
    if not folds:
        raise ValueError(f"graph {graph.name!r}: GEMM epilogue fold: got no gelu after a matmul with its backward; "
                         "expected a training step with GELU layers")
    drop, outputs = set(), {}
    for gelu, gelu_bwd in folds:
        drop |= {gelu.name, gelu_bwd.name}
        outputs[graph.producer(gelu.inputs[0].name).name] = gelu.outputs
        outputs[graph.producer(gelu_bwd.inputs[0].name).name] = gelu_bwd.outputs
    ops = [replace(op, outputs=outputs[op.name]) if op.name in outputs else op
           for op in graph.ops if op.name not in drop]
    return OpGraph(graph.name, ops, {**dict(graph.meta), "gelu_in_gemm_epilogue": len(folds)})


def _gelu_folds(graph: Any) -> list[tuple[Any, Any]]:
    """(gelu, gelu backward) pairs the pass folds: the gelu's input is made by a matmul whose output only the gelu
    and its backward read, at a width that is a multiple of :data:`GELU_FOLD_WIDTH_MULTIPLE`, and the backward's
    incoming gradient is made by a matmul whose output only that backward reads."""
    bwd_of = {op.inputs[1].name: op for op in graph.ops
              if op.kind == "elementwise_bwd" and op.attrs.get("op") == "gelu" and len(op.inputs) == 2}
    folds = []
    for op in graph.ops:
        if op.kind != "elementwise" or op.attrs.get("op") != "gelu":
            continue
        pre = op.inputs[0]
        back = bwd_of.get(pre.name)
        gemm = graph.producer(pre.name)
        if back is None or gemm is None or gemm.kind != "matmul" or pre.shape[-1] % GELU_FOLD_WIDTH_MULTIPLE:
            continue
        dgemm = graph.producer(back.inputs[0].name)
        if dgemm is None or dgemm.kind != "matmul":
            continue
        if {c.name for c in graph.consumers(pre.name)} <= {op.name, back.name} and \
                {c.name for c in graph.consumers(back.inputs[0].name)} == {back.name}:
            folds.append((op, back))
    return folds

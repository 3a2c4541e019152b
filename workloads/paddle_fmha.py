"""PaddlePaddle's cuDNN fused attention (``fused_dot_product_self_attention``) and the score tensors it stores.

DeepLearningExamples' PaddlePaddle BERT sets ``build_strategy.fuse_dot_product_attention`` under ``--amp`` with
``--fuse-mha`` (``program.py`` ``create_strategy`` @ a5388a4), and Paddle's ``fuse_dot_product_attention_pass``
replaces the matmul, mask add, softmax, dropout and matmul of ``paddle.nn.MultiHeadAttention`` with one
``fused_dot_product_self_attention`` op and its grad op. Unlike a flash-style kernel, that op keeps the whole
score matrix between its forward and backward (:data:`PADDLE_CUDNN_FMHA_SOURCE`):

* forward: its ``SoftmaxOut`` output is ``[batch, heads, seq, seq]`` in the input dtype (the op's ``InferShape``),
  allocated by the kernel and passed to cuDNN as the non-virtual ``S`` tensor (the dropped-out softmax,
  ``createDropout``): written once;
* backward: the grad op takes ``SoftmaxOut`` as input and cuDNN's backward graph reads it as ``S`` (the ``dV``
  matmul and the softmax backward), and the kernel allocates a temporary ``dS`` of the same shape that it hands to
  cuDNN as the non-virtual ``dS`` tensor, written by the softmax backward and read by the ``dQ`` and ``dK``
  matmuls: ``S`` read once, ``dS`` written once and read back at least once.

:func:`stored_score_attention` marks each attention op with those passes over the score matrix
(``stored_score_passes``: 1 forward, 3 backward); the GPU lowering adds that traffic to the fused kernel's
(:func:`simulator.lowering.gpu._stored_scores`). Not priced here: cuDNN's backward graph has four matmuls per
query-key pair (``dV``, ``dP``, ``dQ``, ``dK``) where FlashAttention-2's, which the kernel's compute term follows,
recomputes the scores with a fifth, so the compute term keeps a matmul this kernel does not run; and
``run_cudnn_fmha_fwd`` / ``run_cudnn_fmha_bwd`` ``cudaMalloc`` and ``cudaFree`` a workspace around every call when
the plan's workspace size is above zero, which no source read gives for this plan.
"""

from __future__ import annotations

from typing import Any

#: Where the score tensors of the fused attention op are read, written and sized.
PADDLE_CUDNN_FMHA_SOURCE = (
    "PaddlePaddle/Paddle @ 56eb9d499c91a44c57f3ad2c757ae91dd6be553c paddle/fluid/operators/fused/"
    "fused_dot_product_attention_op.cc (InferShape: SoftmaxOut {batch, heads, seq, seq}; the grad op takes SoftmaxOut) "
    "and fused_dot_product_attention_op.cu (the forward kernel allocates SoftmaxOut and passes it as devPtrS; the grad "
    "kernel allocates a dS tensor of SoftmaxOut's dims and passes it as devPtrdS; sequence 64..512, a multiple of 64; "
    "cuDNN >= 8.9.1); paddle/phi/kernels/gpudnn/mha_cudnn_frontend.cu (the version whose run_cudnn_fmha_fwd and "
    "run_cudnn_fmha_bwd take devPtrS and devPtrdS: createDropout's output S_ID is non-virtual; the backward graph "
    "reads S_ID and binds dS_ID, dQ = dS K, dK = dS^T Q); NVIDIA/DeepLearningExamples PaddlePaddle/LanguageModeling/"
    "BERT/program.py @ a5388a45f71a949639b35cc5b990bd130d2d8164 (build_strategy.fuse_dot_product_attention = "
    "args.fuse_mha under --amp)")

#: Passes over the ``[batch, heads, seq_q, seq_kv]`` score matrix the fused op makes beyond a flash-style kernel:
#: the forward writes ``S``; the backward reads ``S``, writes ``dS`` and reads ``dS`` back.
STORED_SCORE_PASSES = {"attention": 1, "attention_bwd": 3}

#: The attribute the GPU lowering reads (passes over the score matrix, in the op's input dtype).
STORED_SCORE_ATTR = "stored_score_passes"


def stored_score_attention(graph: Any) -> Any:
    """``graph`` with every ``attention`` / ``attention_bwd`` op marked with the passes over its score matrix that
    PaddlePaddle's cuDNN fused attention makes (:data:`STORED_SCORE_PASSES`, :data:`PADDLE_CUDNN_FMHA_SOURCE`).
    A graph without attention ops is refused (a located error)."""
    from dataclasses import replace

    from workloads.ir import Attrs, OpGraph

    if not any(op.kind in STORED_SCORE_PASSES for op in graph.ops):
        raise ValueError(f"graph {graph.name!r}: stored attention scores: got no attention op; expected a graph "
                         "with fused attention")
    ops = [replace(op, attrs=Attrs({**op.attrs, STORED_SCORE_ATTR: STORED_SCORE_PASSES[op.kind]}))
           if op.kind in STORED_SCORE_PASSES else op for op in graph.ops]
    return OpGraph(graph.name, ops, {**dict(graph.meta), "stored_scores": True})

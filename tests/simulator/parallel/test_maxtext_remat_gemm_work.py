"""The GEMM work a MaxText row is charged equals a hand count of its remat policy as MaxText runs it
(the rows predicted as ``validate --dataset training`` predicts them; docs/tpu.md, "The MXU shapes, remat ...").

Per token, a Llama layer's weight GEMMs are q (2 d^2), k and v (2 x 2 d d_kv), out (2 d^2) and the SwiGLU MLP
(3 x 2 d d_ff); the LM head 2 d V; GPT-3's 12 d^2 per layer (2 x 12 d^2 FLOPs). Forward + backward is 3x the
forward; MaxText's remat policy adds the forward of every GEMM whose output is neither saved nor offloaded
(MaxText/configs/base.yml: under ``custom`` every name not listed is ``remat``; ``full`` saves nothing but the
layer inputs) and that the backward reads: not the MLP's down projection (``mlpwo``), whose output only feeds the
layer's output (jax.checkpoint's recomputation is dead-code-eliminated, workloads.training.prune_dead_recompute);
the LM head outside the scanned layers not included.
"""

from __future__ import annotations

import logging

import pytest

from simulator.parallel.training_validation import load_training_rows


def _gemm_flops_per_chip(row_id: str) -> float:
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.stacks import profile_options
    from simulator.parallel.training_validation import _plan, _system_name, stated_recipe

    row = next(r for r in load_training_rows() if r.id == row_id)
    n = row.ints["n_devices"]
    system, _ = _system_name(row, n)
    recipe = stated_recipe(row)
    logging.disable(logging.WARNING)
    try:
        res = evaluate_plan(row["model"], load_hardware(system), _plan(row, n), profile_options(recipe["framework"]),
                            train=True, seq=row.ints["seq"], dtype="bf16", **recipe)
    finally:
        logging.disable(logging.NOTSET)
    repeats = res.report_repeats or (res.plan.microbatches,) * len(res.reports)
    return sum(r.flops * t for rep, t in zip(res.reports, repeats, strict=True) for r in rep.records
               if r.kind == "matmul")


def _llama(d: int, d_kv: int, d_ff: int, layers: int, vocab: int) -> tuple[float, float, float, float]:
    """(q + k + v, out, MLP) FLOPs per token of all layers, and the LM head's."""
    return (layers * (2 * d * d + 4 * d * d_kv), layers * 2 * d * d, layers * 6 * d * d_ff, 2 * d * vocab)


@pytest.mark.parametrize(("row_id", "tokens", "expected"), [
    # Llama 3.1 8B, custom: q/k/v and out_proj offloaded, the MLP's gate and up recomputed: 3 x 15.01 + 7.52 GFLOP
    ("train-111", 3 * 8192, lambda: (lambda qkv, o, mlp, head: 3 * (qkv + o + mlp + head) + 2 * mlp / 3)(
        *_llama(4096, 1024, 14336, 32, 128256))),
    # Llama 3.1 70B, custom: q/k/v offloaded, out_proj and the MLP's gate and up recomputed: 3 x 139.0 + 85.9 GFLOP
    ("train-117", 2 * 8192, lambda: (lambda qkv, o, mlp, head: 3 * (qkv + o + mlp + head) + o + 2 * mlp / 3)(
        *_llama(8192, 1024, 28672, 80, 128256))),
    # GPT-3 175B, full: every layer GEMM again but fc2 (2 x 4 d^2 of the 2 x 12 d^2), 3 x 349.2 + 232.0 GFLOP a token
    ("train-126", 3 * 2048, lambda: 3 * (96 * 24 * 12288**2 + 2 * 12288 * 50257) + 96 * 16 * 12288**2),
    # Llama 2 70B, qkv_proj_offloaded (MaxText/layers/models.py @ 14b5876ea: only query/key/value_proj offloaded,
    # nothing saved): the same recomputation as train-117, vocabulary 32,000: 3 x 137.4 + 85.9 GFLOP a token
    ("train-122", 2 * 4096, lambda: (lambda qkv, o, mlp, head: 3 * (qkv + o + mlp + head) + o + mlp * 2 / 3)(
        *_llama(8192, 1024, 28672, 80, 32000))),
    # Gemma 3 12B, custom with every name 'remat': every layer GEMM again, the MLP's down projection too (its output
    # feeds post_ffw_norm, whose backward reads it; use_post_ffw_norm in configs/models/gemma3-12b.yml @ 50bafeb98),
    # and the tied LM head again in the vocab-tiled loss's backward (num_vocab_tiling 16): 4 x 23.53 GFLOP a token
    ("train-130", 32768, lambda: 4 * (48 * (2 * 3840 * 4096 + 4 * 3840 * 2048 + 2 * 4096 * 3840 + 6 * 3840 * 15360)
                                      + 2 * 3840 * 262144)),
])
def test_gemm_work_follows_the_rows_remat_policy(row_id, tokens, expected):
    assert _gemm_flops_per_chip(row_id) == pytest.approx(tokens * expected(), rel=1e-4)

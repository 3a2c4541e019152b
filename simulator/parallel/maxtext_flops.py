"""The FLOPs MaxText counts per device and step: the numerator of the TFLOP/s and MFU it prints.

A MaxText row's MFU (or TFLOP/s) is MaxText's own FLOP count over the step time, not the model's.
Comparing a predicted step with such a row therefore converts the predicted step time with MaxText's
formula at the row's commit, never with the model's FLOP count (which also counts norms, elementwise
work and the causal mask as the kernels run it). Three versions of the formula are stated here, all for
dense decoders (MoE, MLA and interleaved-window models are counted by other branches of MaxText's code):

``"2023"`` -- ``calculate_training_tflops`` in ``MaxText/train.py`` @ 76bd53b0f44caf989c88189afadeb1062f9254f0
    ("https://arxiv.org/pdf/2204.02311.pdf Appendix B"): ``6 x num_model_parameters x max_target_length x
    per_device_batch_size`` plus ``12 x num_query_heads x num_decoder_layers x head_dim x max_target_length^2
    x per_device_batch_size / 2`` ("due to causality in attention"), where ``num_model_parameters`` is every
    parameter of the train state (``max_utils.calculate_num_params_from_pytree``: the token embedding, which
    is also the LM head under ``logits_via_embedding``, every kernel and every norm scale).
``"2024"`` -- ``calculate_tflops_training_per_device`` in ``MaxText/maxtext_utils.py`` at 770fcf7d1 (2024-10-29),
    14b5876ea (tpu-recipes-v0.1.2) and 9f1820b47 (tpu-recipes-v0.1.4): per token ``2 x emb x mlp x
    (len(mlp_activations) + 1)`` for the MLP, ``2 x emb x (heads + 2 kv_heads) x head_dim`` for q/k/v,
    ``2 x heads x head_dim x emb`` for the output projection, per layer, plus ``2 x emb x vocab`` for the LM head
    (``embedding_flops``), all times 3 (forward and backward); attention ``4 x seq^2 x heads x head_dim`` per
    sequence and layer, times 3, **without** the causal halving ("megatron tflops calculation does not account
    for causality in attention").
``"2025"`` -- the same file from a4c01726e ("correct mask flops", 2025-07-22) on: the ``"2024"`` count with the
    attention term halved for the causal mask (``causal_attention_flops = noncausal_attention_flops / 2``).
    No version counts recomputation.

Examples
--------
>>> from workloads.zoo.transformer import zoo_config
>>> round(maxtext_flops_per_device(zoo_config("gpt3-175b"), batch=3, seq=2048, version="2024") / 1e12, 1)
6613.2
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAXTEXT_FLOP_VERSIONS", "maxtext_param_count", "maxtext_flops_per_device", "maxtext_flop_version"]

#: the versions of MaxText's FLOP formula stated here (module docstring)
MAXTEXT_FLOP_VERSIONS = ("2023", "2024", "2025")


def _check_dense(cfg: Any) -> None:
    if getattr(cfg, "experts", 0) or getattr(cfg, "encoder_only", False) or getattr(cfg, "is_encoder_decoder", False):
        raise ValueError(f"maxtext flops: model {cfg.name!r} is not a dense decoder; expected a dense decoder-only "
                         "transformer (MaxText counts MoE and encoder models with other formulas)")


def maxtext_param_count(cfg: Any) -> int:
    """Parameters of a dense decoder's train state as MaxText counts them (``calculate_num_params_from_pytree``):
    the embedding (once when tied), q/k/v/out kernels, the MLP kernels (three when gated), biases where the
    model has them, two norm scales per layer (a bias too for layernorm) and the final norm.

    >>> from workloads.zoo.transformer import zoo_config
    >>> maxtext_param_count(zoo_config("maxtext-16b-2023"))
    16274232320
    """
    _check_dense(cfg)
    d, hd, h, kv = cfg.d_model, cfg.d_head, cfg.heads, cfg.n_kv_heads
    attn = d * hd * (h + 2 * kv) + h * hd * d
    attn += (hd * (h + 2 * kv) if cfg.qkv_bias else 0) + (d if cfg.out_bias else 0)
    mats = 3 if cfg.gated else 2
    mlp = mats * d * cfg.d_ff + ((mats - 1) * cfg.d_ff + d if cfg.mlp_bias else 0)
    norm = d * (2 if cfg.norm == "layernorm" else 1)
    per_layer = attn + mlp + 2 * norm
    embed = cfg.vocab * d * (1 if cfg.tied_embeddings else 2)
    return int(cfg.layers * per_layer + embed + (norm if cfg.final_norm else 0))


def maxtext_flops_per_device(cfg: Any, *, batch: float, seq: int, version: str) -> float:
    """FLOPs MaxText counts for one training step of one device (``per_device_batch_size`` = ``batch``
    sequences of ``seq`` tokens) under formula ``version`` (:data:`MAXTEXT_FLOP_VERSIONS`)."""
    _check_dense(cfg)
    h, hd, layers = cfg.heads, cfg.d_head, cfg.layers
    if version == "2023":
        learnable = 6.0 * maxtext_param_count(cfg) * seq * batch
        return learnable + 12.0 * h * layers * hd * seq * seq * batch / 2.0
    if version in ("2024", "2025"):
        d, kv = cfg.d_model, cfg.n_kv_heads
        tokens = batch * seq
        ffn = 2.0 * tokens * cfg.d_ff * d * ((2 if cfg.gated else 1) + 1)
        qkv = 2.0 * tokens * d * (h + 2 * kv) * hd
        proj = 2.0 * tokens * h * hd * d
        embedding = 2.0 * tokens * d * cfg.vocab
        attention = 4.0 * batch * seq * seq * h * hd
        causal = 0.5 if version == "2025" else 1.0
        return ((ffn + qkv + proj) * layers + embedding) * 3.0 + causal * attention * layers * 3.0
    raise ValueError(f"maxtext flops: version {version!r}; expected one of {', '.join(MAXTEXT_FLOP_VERSIONS)}")


def maxtext_flop_version(framework_version: str) -> str | None:
    """The formula version of a MaxText row from its ``framework_version`` text: ``"2023"`` for the December
    2023 commit 76bd53b0f the v5e/v5p performance tables were printed at, else ``None`` (not stated here)."""
    return "2023" if "76bd53b0f" in framework_version else None

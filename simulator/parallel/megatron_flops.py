"""The FLOPs Megatron-Bridge counts per token: the numerator of the "Model TFLOP/s/GPU" its performance tables print.

A Megatron-Bridge row's printed TFLOP/s is ``num_floating_point_operations`` in
``src/megatron/bridge/training/utils/flop_utils.py`` (``transformer_flops``) over the step time, not the work the
kernels do. The formula is read at NVIDIA-NeMo/Megatron-Bridge v0.2.0 (the NeMo 25.11 container); its decoder
branch is the same through v0.4.2 (the 26.04 containers): the sliding-window term came later (eaddead3f,
first released in v0.5.0). Per token, forward and backward (``3 x 2`` per multiply-add):

- every linear layer's multiply-adds once per token times 6: q, k, v and the output projection
  (``12 h^2 (1 + g/H) q/h``); the MLP ``12 h ffn m`` with ``m`` = 3/2 only when the model is gated **and**
  its ``activation_func`` is ``F.silu``, else 1 (two projections, not three); an MoE layer's ``top_k`` routed
  experts and its shared expert likewise; the LM head ``6 h V`` over the vocabulary padded to a multiple of
  ``make_vocab_size_divisible_by`` (128) x the tensor-parallel degree;
- the attention core ``6 s q`` (``12 h^2 (s / h / 2) q/h``: half the causal square), on **every** layer: a
  sliding-window layer is counted as a full causal one;
- multi-latent attention (``multi_latent_attention``) by its own branch: the q and kv low-rank projections with
  their norms, the rotary key columns, the output projection and the core over ``s/2`` keys;
- multi-token-prediction layers (``mtp_num_layers``) as further layers of the last layer's kind, with their
  norms, their ``2 h -> h`` projection and one more LM head each.

Not counted: routers, norms, element-wise work, recomputation.

Examples
--------
>>> from workloads.zoo.transformer import zoo_config
>>> round(megatron_flops_per_token(zoo_config("gpt-oss-120b"), seq=4096) / 1e9, 3)
27.164
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MEGATRON_NOT_SILU_GLU", "MEGATRON_MTP_LAYERS", "MEGATRON_VOCAB_MULTIPLE", "megatron_flops_per_token",
           "megatron_padded_vocab"]

#: zoo models whose Megatron-Bridge provider builds a gated MLP whose ``activation_func`` is not ``F.silu``, so
#: ``transformer_flops`` counts two MLP projections instead of three: GPT-OSS (``GPTOSSProvider``:
#: ``activation_func = quick_gelu``, ``gated_linear_unit = True``; src/megatron/bridge/models/gpt_oss/
#: gpt_oss_provider.py @ v0.2.0)
MEGATRON_NOT_SILU_GLU = frozenset({"gpt-oss-120b"})

#: multi-token-prediction layers of a zoo model's Megatron-Bridge pretraining recipe (the zoo's graph has none):
#: DeepSeek-V3 ``mtp_num_layers = 1`` (src/megatron/bridge/recipes/deepseek/deepseek_v3.py
#: ``deepseek_v3_pretrain_config`` @ v0.2.0)
MEGATRON_MTP_LAYERS = {"deepseek-v3": 1}

#: ``GPTModelProvider.make_vocab_size_divisible_by`` (src/megatron/bridge/models/gpt_provider.py @ v0.2.0)
MEGATRON_VOCAB_MULTIPLE = 128


def megatron_padded_vocab(vocab: int, tp: int = 1) -> int:
    """The vocabulary as Megatron pads it: up to a multiple of :data:`MEGATRON_VOCAB_MULTIPLE` x ``tp``
    (``calculate_padded_vocab_size``, src/megatron/bridge/utils/vocab_utils.py @ v0.2.0).

    >>> megatron_padded_vocab(128256, 4), megatron_padded_vocab(201088)
    (128512, 201088)
    """
    multiple = MEGATRON_VOCAB_MULTIPLE * tp
    return int(math.ceil(vocab / multiple) * multiple)


def _layer_counts(cfg: Any, mtp: int) -> tuple[int, int]:
    """(dense, MoE) MLP layers as ``transformer_flops`` counts them, the MTP layers taking the last layer's kind."""
    if not cfg.experts:
        return cfg.layers + mtp, 0
    pattern = [i >= cfg.first_dense and i % cfg.moe_every == cfg.moe_offset for i in range(cfg.layers)]
    moe = sum(pattern) + (mtp if pattern[-1] else 0)
    return cfg.layers + mtp - moe, moe


def _mlp(cfg: Any, mtp: int) -> float:
    """The MLP term per token: ``12 h`` x (dense width x dense layers + (routed + shared) widths x MoE layers)."""
    dense, moe = _layer_counts(cfg, mtp)
    glu = 1.5 if cfg.gated and cfg.name not in MEGATRON_NOT_SILU_GLU else 1.0
    dense_ff = (cfg.dense_d_ff or cfg.d_ff) if cfg.experts else cfg.d_ff
    widths = dense_ff * dense + (cfg.d_ff * cfg.top_k + cfg.shared_d_ff) * moe
    return 12.0 * cfg.d_model * glu * widths


def _attention(cfg: Any, seq: int, layers: int) -> float:
    """The self-attention term per token: projections and the causal core (MLA's branch for a latent model)."""
    h, heads = cfg.d_model, cfg.heads
    if cfg.kv_lora_rank:
        qk, rope, v = cfg.d_head, cfg.rope_head_dim, cfg.v_head_dim
        q_term = cfg.q_lora_rank * (h + heads * (qk + rope) + 1) if cfg.q_lora_rank else h * heads * (qk + rope)
        per_layer = (q_term + cfg.kv_lora_rank * (h + heads * (qk + v) + 1) + h * rope + heads * v * h
                     + seq * heads * (qk + rope) / 2 + seq * heads * v / 2)
        return 6.0 * layers * per_layer
    q = cfg.d_head * heads
    return 12.0 * layers * h * h * (1 + cfg.n_kv_heads / heads + seq / h / 2) * (q / h)


def megatron_flops_per_token(cfg: Any, *, seq: int, tp: int = 1) -> float:
    """FLOPs Megatron-Bridge's ``transformer_flops`` counts per token of a training step (module docstring) for the
    zoo decoder ``cfg`` at sequence length ``seq`` and tensor-parallel degree ``tp`` (which pads the vocabulary).
    Multiplied by a row's tokens/s per GPU it gives the "Model TFLOP/s/GPU" the row's table prints."""
    if not cfg.is_decoder_lm:
        raise ValueError(f"megatron flops: model {cfg.name!r} is not a decoder-only transformer; expected the "
                         "GPT models transformer_flops counts")
    mtp = MEGATRON_MTP_LAYERS.get(cfg.name, 0)
    h = cfg.d_model
    layers = cfg.layers + mtp
    mtp_terms = 6.0 * mtp * (3 * h + 2 * h * h)
    logits = 6.0 * h * megatron_padded_vocab(cfg.vocab, tp) * (mtp + 1)
    return _mlp(cfg, mtp) + _attention(cfg, seq, layers) + mtp_terms + logits

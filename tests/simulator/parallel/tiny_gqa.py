"""The small grouped-query Llama-style model the parallel-plan tests build by hand: d 128, 8 query heads of 16,
2 key/value heads (GQA 4), SwiGLU 256, RMSNorm, RoPE, an untied head, vocabulary 512, no biases."""

from __future__ import annotations

from workloads.zoo.transformer import TransformerConfig


def tiny_gqa(name: str, layers: int) -> TransformerConfig:
    """The model with ``layers`` layers, named ``name`` (each test file its own, as its graphs are cached by it)."""
    return TransformerConfig(name, vocab=512, d_model=128, layers=layers, heads=8, kv_heads=2, d_ff=256,
                             mlp="swiglu", norm="rmsnorm", pos="rope", tied_embeddings=False, qkv_bias=False,
                             out_bias=False, mlp_bias=False)

"""Zoo entries added for the published training runs: parameter counts from their config values, by hand."""

from __future__ import annotations

import pytest

from workloads.zoo import build_model


def _decoder(vocab: int, d: int, layers: int, q_dim: int, kv_dim: int, ffn: int, *, tied: bool, experts: int = 0) -> int:
    """Bias-free pre-norm decoder: embeddings (twice when untied), per layer q/k/v/o, two RMSNorm weights,
    the MLP (``ffn`` already counts its matrices), a router of ``experts`` outputs; one final RMSNorm."""
    attn = d * q_dim + 2 * d * kv_dim + q_dim * d
    router = d * experts
    return vocab * d * (1 if tied else 2) + layers * (attn + 2 * d + router + ffn) + d


CASES = [
    # Mixtral 8x22B: 56 layers, 6144 wide, 48 x 128 query / 8 x 128 KV heads, 8 SwiGLU experts of 16384, vocab 32768
    ("mixtral-8x22b", _decoder(32768, 6144, 56, 6144, 1024, 8 * 3 * 6144 * 16384, tied=False, experts=8)),
    # Qwen3-30B-A3B: 48 layers, 2048 wide, 32 x 128 / 4 x 128 heads, 128 experts of 768, vocab 151936
    # plus the q/k RMSNorm weights of 128 in every layer (QK-norm)
    ("qwen3-30b-a3b", _decoder(151936, 2048, 48, 4096, 512, 128 * 3 * 2048 * 768, tied=False, experts=128)
     + 48 * 2 * 128),
    # Qwen3-235B-A22B: 94 layers, 4096 wide, 64 x 128 / 4 x 128 heads, 128 experts of 1536
    ("qwen3-235b-a22b", _decoder(151936, 4096, 94, 8192, 512, 128 * 3 * 4096 * 1536, tied=False, experts=128)
     + 94 * 2 * 128),
    # MaxText 2023 scale 16: 32 layers, width 5120, 32 heads of 256 (MHA), ReLU MLP 32768, tied vocab 32768
    ("maxtext-16b-2023", _decoder(32768, 5120, 32, 8192, 8192, 2 * 5120 * 32768, tied=True)),
    # scale 1024: 128 layers, width 20480, 128 heads of 256, ReLU MLP 131072
    ("maxtext-1024b-2023", _decoder(32768, 20480, 128, 32768, 32768, 2 * 20480 * 131072, tied=True)),
]


@pytest.mark.parametrize(("name", "expected"), CASES, ids=[c[0] for c in CASES])
def test_params_match_the_config(name: str, expected: int) -> None:
    assert build_model(name, batch=1, seq=16).params == expected


def test_published_sizes() -> None:
    """Published totals: Mixtral 8x22B 141B, Qwen3-30B-A3B 30.5B, Qwen3-235B-A22B 235B (model cards)."""
    assert round(build_model("mixtral-8x22b", batch=1, seq=16).params / 1e9) == 141
    assert round(build_model("qwen3-30b-a3b", batch=1, seq=16).params / 1e8) == 305
    assert round(build_model("qwen3-235b-a22b", batch=1, seq=16).params / 1e9) == 235

"""The GEMM shapes of the published MaxText rows on the arrays they ran on (TPU v6e 256x256 MXUs, v5p 128x128).

Pins what docs/tpu.md ("The MXU shapes, remat policies, AQT and MoE of the rows, checked") states: every
projection and expert GEMM of the rows' models fills the array, the seven attention GEMMs over head_dim 128
(scores, dP: contraction 128; dV, dK, dQ: 128 output columns) use half of a v6e MXU and all of a v5p one,
DeepSeek-V3's 192-wide latent-attention scores three quarters of a v5p one, and MaxText's ``custom`` remat
defaults at the Trillium rows' commit are the table the policy reads.
"""

import pytest

from hwmodels.catalog import load_device
from simulator.lowering.tpu import map_gemm
from workloads.zoo.transformer import zoo_config

V6E_ROW_MODELS = ("llama-3-8b", "llama-3-70b", "llama-3.1-405b", "llama-2-70b", "mistral-7b", "mixtral-8x7b",
                  "mixtral-8x22b", "gpt3-175b", "gemma3-12b")
V5P_MOE_MODELS = ("deepseek-v3", "llama4-scout-17b-16e", "llama4-maverick-17b-128e")


def _widths(name: str) -> dict[str, int]:
    c = zoo_config(name)
    d_head = c.head_dim or c.d_model // c.heads
    kv = c.kv_heads or c.heads
    return {"d_model": c.d_model, "d_ff": c.d_ff, "q": c.heads * d_head, "kv": kv * d_head}


@pytest.mark.parametrize("name", V6E_ROW_MODELS)
def test_every_projection_of_the_v6e_row_models_is_a_multiple_of_the_256_wide_mxu(name):
    # d_model, d_ff and the q / kv projection widths divide by 256, so no projection pays padding on v6e
    w = _widths(name)
    assert {k: v % 256 for k, v in w.items()} == dict.fromkeys(w, 0), w


@pytest.mark.parametrize("name", V5P_MOE_MODELS)
def test_every_expert_gemm_of_the_v5p_moe_rows_is_a_multiple_of_the_128_wide_mxu(name):
    w = _widths(name)
    assert {k: v % 128 for k, v in w.items()} == dict.fromkeys(w, 0), w


def test_attention_backward_gemms_use_half_of_a_v6e_mxu_and_all_of_a_v5p_mxu():
    # Eight heads of 2,048 queries x 2,048 keys x head_dim 128, bf16, weight stationary. The backward kernels'
    # GEMMs: S and dP = dO V^T contract over 128 (M, N, K) = (2048, 2048, 128); dV = P^T dO, dK = dS^T Q and
    # dQ = dS K have 128 output columns (2048, 128, 2048). v6e (4 MXUs, 256x256): either way one 128-long
    # dimension in 8 folds of 2,814 cycles, overlapped: 2,814 + 7 x 2,048 - 1 = 17,149 per GEMM, two GEMMs per
    # array (split 4/1/1): 34,298 cycles, 8 x 2048^2 x 128 / (34,298 x 65,536 x 4) = 47.77 %. v5p (2 cores x 4
    # MXUs, 128x128): 16 folds of 2,430 -> 2,430 + 15 x 2,048 - 1 = 33,149 cycles, one GEMM per array, 98.85 %.
    v6e, v5p = load_device("tpu-v6e"), load_device("tpu-v5p")
    for m, n, k in ((2048, 2048, 128), (2048, 128, 2048)):
        a6 = map_gemm(v6e, 8, m, n, k, in_bytes=2, out_bytes=2)
        a5 = map_gemm(v5p, 8, m, n, k, in_bytes=2, out_bytes=2)
        assert (a6.split, a6.per_array_batch, a6.folds, a6.cycles) == ((4, 1, 1), 2, 8, 34_298)
        assert (a5.split, a5.per_array_batch, a5.folds, a5.cycles) == ((8, 1, 1), 1, 16, 33_149)
        assert a6.util_pct == pytest.approx(100 * 8 * 2048 * 2048 * 128 / (34_298 * 65_536 * 4), rel=1e-12)
        assert a5.util_pct == pytest.approx(100 * 8 * 2048 * 2048 * 128 / (33_149 * 16_384 * 8), rel=1e-12)
    # Gemma 3's head_dim 256 fills the v6e array: the same FLOPs at half the cycles
    g3 = map_gemm(v6e, 4, 2048, 2048, 256, in_bytes=2, out_bytes=2)
    assert g3.util_pct == pytest.approx(2 * 47.77, abs=0.5)


def test_latent_attention_scores_of_deepseek_v3_use_three_quarters_of_a_v5p_mxu():
    # MLA scores contract over qk_nope 128 + qk_rope 64 = 192 columns (deepseek3-671b.yml): two row folds,
    # the second half full. v5p: 32 folds of 2,048 + 128 + 128 + 128 - 2 = 2,430 cycles -> 2,430 + 31 x 2,048 - 1
    # = 65,917 cycles; 8 x 2048^2 x 192 / (65,917 x 16,384 x 8) = 74.57 %.
    c = zoo_config("deepseek-v3")
    assert (c.head_dim, c.rope_head_dim, c.v_head_dim) == (128, 64, 128)
    a = map_gemm(load_device("tpu-v5p"), 8, 2048, 2048, c.head_dim + c.rope_head_dim, in_bytes=2, out_bytes=2)
    assert (a.folds, a.cycles) == (32, 65_917)
    assert a.util_pct == pytest.approx(100 * 8 * 2048 * 2048 * 192 / (65_917 * 16_384 * 8), rel=1e-12)


def test_projection_and_expert_gemms_of_the_rows_keep_the_arrays_full():
    # GPT-3's fused QKV projection on a v6e chip (6,144 tokens per chip), Llama 3.1 8B's GQA key/value
    # projection (1,024 columns; 24,576 tokens), DeepSeek-V3's expert up-projection on a v5p chip (1,536 rows
    # an expert on average: 49,152 tokens x 8 / 256)
    v6e, v5p = load_device("tpu-v6e"), load_device("tpu-v5p")
    assert map_gemm(v6e, 1, 6144, 3 * 12288, 12288, in_bytes=2, out_bytes=2).util_pct > 99.9
    assert map_gemm(v6e, 1, 24576, 1024, 4096, in_bytes=2, out_bytes=2).util_pct > 99.5
    assert map_gemm(v5p, 1, 1536, 2048, 7168, in_bytes=2, out_bytes=2).util_pct > 99.5


def test_custom_remat_defaults_are_those_of_the_trillium_rows_commit():
    # MaxText/configs/base.yml @ 9f1820b47 (tpu-recipes-v0.1.4, the Llama 3.1 rows): decoder_layer_input
    # 'device', every other custom checkpoint name 'remat' -- the table custom_choices fills in
    from workloads.recompute import CUSTOM_TENSORS

    at_commit = {"decoder_layer_input": "device", "context": "remat", "mlpwi": "remat", "mlpwi_0": "remat",
                 "mlpwi_1": "remat", "mlpwo": "remat", "query_proj": "remat", "key_proj": "remat",
                 "value_proj": "remat", "qkv_proj": "remat", "out_proj": "remat"}
    assert {k: CUSTOM_TENSORS[k] for k in at_commit} == at_commit

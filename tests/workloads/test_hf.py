"""Hugging Face config.json reading: the zoo's exact parameter counts from real config fields, and one-line errors."""

from __future__ import annotations

import json

import pytest

from workloads.hf import HFConfigError, build_from_config, config_to_transformer
from workloads.ir import Role
from workloads.zoo import build_model
from workloads.zoo.transformer import build

# the architecture fields of the public config.json files (values as published on the Hub)
GPT2 = {"model_type": "gpt2", "activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "vocab_size": 50257, "layer_norm_epsilon": 1e-5}
LLAMA2_7B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
             "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
             "torch_dtype": "float16", "vocab_size": 32000}
MIXTRAL = {"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
           "max_position_embeddings": 32768, "num_attention_heads": 32, "num_experts_per_tok": 2,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "vocab_size": 32000,
           "tie_word_embeddings": False, "sliding_window": None}
MISTRAL = {"model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
           "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000}
BERT = {"model_type": "bert", "hidden_act": "gelu", "hidden_size": 768, "intermediate_size": 3072,
        "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 2,
        "vocab_size": 30522}
OPT = {"model_type": "opt", "activation_function": "relu", "do_layer_norm_before": True, "ffn_dim": 8192,
       "hidden_size": 2048, "max_position_embeddings": 2048, "num_attention_heads": 32, "num_hidden_layers": 24,
       "vocab_size": 50272, "word_embed_proj_dim": 2048, "enable_bias": True}
VIT = {"model_type": "vit", "hidden_act": "gelu", "hidden_size": 768, "image_size": 224, "intermediate_size": 3072,
       "num_attention_heads": 12, "num_channels": 3, "num_hidden_layers": 12, "patch_size": 16, "qkv_bias": True,
       "id2label": {str(i): f"class_{i}" for i in range(1000)}}
QWEN2 = {"model_type": "qwen2", "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
         "max_position_embeddings": 32768, "num_attention_heads": 14, "num_hidden_layers": 24,
         "num_key_value_heads": 2, "tie_word_embeddings": True, "vocab_size": 151936}
NEOX = {"model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 512, "intermediate_size": 2048,
        "max_position_embeddings": 2048, "num_attention_heads": 8, "num_hidden_layers": 6, "rotary_pct": 0.25,
        "tie_word_embeddings": False, "use_parallel_residual": True, "vocab_size": 50304}


def _params(cfg) -> int:
    return build(cfg, batch=1, seq=cfg.image_size if cfg.is_vision else 8, phase="forward").params


@pytest.mark.parametrize(("config", "zoo"), [
    (GPT2, "gpt2"), (LLAMA2_7B, "llama-2-7b"), (MIXTRAL, "mixtral-8x7b"), (MISTRAL, "mistral-7b"),
    (BERT, "bert_base"), (OPT, "opt-1.3b"), (VIT, "vit_b16"),
], ids=["gpt2", "llama", "mixtral", "mistral", "bert", "opt", "vit"])
def test_config_reproduces_zoo_params(config, zoo):
    assert _params(config_to_transformer(config)) == build_model(zoo, seq=8 if zoo != "vit_b16" else 224).params


def test_exact_counts_by_hand():
    assert _params(config_to_transformer(GPT2)) == 124_439_808
    assert _params(config_to_transformer(LLAMA2_7B)) == 6_738_415_616
    # Qwen2 (0.5B shape): tied embeddings, biases on q/k/v only, GQA 14:2, head_dim 64 -- hand-computed
    d, kv = 896, 2 * 64
    layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * 4864 + 2 * d
    assert _params(config_to_transformer(QWEN2)) == 151936 * d + 24 * layer + d == 494_032_768
    # GPT-NeoX: untied head, biases everywhere, LayerNorm with shift
    d = 512
    layer = 4 * d * d + 4 * d + 2 * d * 2048 + 2048 + d + 4 * d
    assert _params(config_to_transformer(NEOX)) == 2 * 50304 * d + 6 * layer + 2 * d


def test_file_and_folder_and_dtype(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA2_7B))
    assert config_to_transformer(p).layers == 32
    g = build_from_config(tmp_path, phase="decode", batch=1, context=128)
    assert g.meta["dtype"] == "fp16"  # from torch_dtype
    assert g.role_bytes(Role.KV_CACHE) == 2 * 32 * 4096 * 128 * 2


def test_invalid_json_names_file_line_and_column(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{\n  "model_type": "gpt2",\n  "n_embd": 768,,\n}')
    with pytest.raises(HFConfigError, match=r"config\.json:3:\d+: invalid JSON") as e:
        config_to_transformer(p)
    assert "\n" not in str(e.value)


def test_missing_key_and_unknown_type(tmp_path):
    bad = dict(LLAMA2_7B)
    del bad["intermediate_size"]
    p = tmp_path / "c.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"c\.json: missing key 'intermediate_size' for model_type 'llama'"):
        config_to_transformer(p)
    with pytest.raises(ValueError, match=r"unknown model_type 'lama'.*did you mean 'llama'\?"):
        config_to_transformer(dict(LLAMA2_7B, model_type="lama"))
    with pytest.raises(ValueError, match="missing key 'model_type'"):
        config_to_transformer({"hidden_size": 4})
    with pytest.raises(ValueError, match="n_layer"):
        config_to_transformer(dict(GPT2, n_layer="twelve"))


def test_config_defaults_fit_a_learned_position_table_and_dtype_is_strict():
    from workloads.hf import build_from_config

    gpt2 = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
            "n_head": 12, "torch_dtype": "float32"}
    g = build_from_config(gpt2)
    assert g.meta["seq"] == 1024 and g.meta["dtype"] == "fp32"
    # the near match is named in the vocabulary the message lists (fp32), not as its alias float32
    with pytest.raises(ValueError, match=r"torch_dtype: unknown dtype; got 'float33'; expected one of fp64, fp32, "
                                         r".*, bool; did you mean 'fp32'\?$"):
        build_from_config({**gpt2, "torch_dtype": "float33"})


# --- families with sliding windows, latent attention and mixtures of experts --------------------------
# Architecture fields as the Hub's config.json files state them (keys the files leave out take the
# transformers configuration class's default, as from_pretrained does).
QWEN3_30B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
             "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
             "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
             "use_sliding_window": False, "sliding_window": None, "max_window_layers": 48}
GEMMA3_12B = {"model_type": "gemma3", "text_config": {
    "model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360, "num_hidden_layers": 48,
    "num_attention_heads": 16, "num_key_value_heads": 8, "sliding_window": 1024, "head_dim": 256}}
GPT_OSS_120B = {"model_type": "gpt_oss", "num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088,
                "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64,
                "num_key_value_heads": 8, "sliding_window": 128, "num_experts_per_tok": 4,
                "layer_types": ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(36)],
                "max_position_embeddings": 131072, "tie_word_embeddings": False, "attention_bias": True}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "kv_lora_rank": 512,
               "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
               "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
               "max_position_embeddings": 163840, "tie_word_embeddings": False}
LLAMA4_SCOUT = {"model_type": "llama4", "text_config": {
    "model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
    "attention_chunk_size": 8192, "max_position_embeddings": 10485760}}
LLAMA4_MAVERICK = {"model_type": "llama4", "text_config": {
    **LLAMA4_SCOUT["text_config"], "num_local_experts": 128, "interleave_moe_layer_step": 2,
    "max_position_embeddings": 1048576}}


def _zoo_config(key):
    from workloads.zoo import load_data
    from workloads.zoo.transformer import config_from_mapping

    spec = {k: v for k, v in load_data("transformers.toml")["models"][key].items()
            if k not in ("family", "description", "source", "aliases", "defaults", "checkpoint")}
    return config_from_mapping(key, spec)


@pytest.mark.parametrize(("config", "zoo", "differs"), [
    # the zoo leaves out Qwen3's per-head q/k RMSNorm (48 layers x 2 x 128 weights); the Hub config has it
    (QWEN3_30B, "qwen3-30b-a3b", {"qk_norm": True}),
    # the zoo follows MaxText's 262144-row table; the Hub's Gemma 3 vocabulary has 262208 rows
    (GEMMA3_12B, "gemma3-12b", {"vocab": 262208}),
    (GPT_OSS_120B, "gpt-oss-120b", {}), (DEEPSEEK_V3, "deepseek-v3", {}),
    (LLAMA4_SCOUT, "llama4-scout-17b-16e", {}), (LLAMA4_MAVERICK, "llama4-maverick-17b-128e", {}),
], ids=["qwen3-moe", "gemma3", "gpt-oss", "deepseek-v3", "llama4-scout", "llama4-maverick"])
def test_new_families_read_as_the_zoo_states_them(config, zoo, differs):
    from dataclasses import replace

    got = config_to_transformer(config, name=zoo)
    assert replace(_zoo_config(zoo), **differs) == got


def test_new_families_parameter_counts():
    # published totals: DeepSeek-V3 671B (tech report Table 1), gpt-oss-120b 116.83B (model card Table 1)
    assert _params(config_to_transformer(DEEPSEEK_V3)) == 671_026_404_352
    assert _params(config_to_transformer(GPT_OSS_120B)) == 116_789_336_640
    # Qwen3-30B-A3B: the zoo's count, the q/k norms (48 x 2 x 128) included
    assert _params(config_to_transformer(QWEN3_30B)) == build_model("qwen3-30b-a3b", seq=8).params
    # Gemma 3 12B: the zoo's count plus the Hub vocabulary's 64 extra tied rows of 3840
    assert _params(config_to_transformer(GEMMA3_12B)) == build_model("gemma3-12b", seq=8).params + 64 * 3840


def test_mistral_sliding_window_prices_fewer_attention_flops():
    s, w, layers, heads, d_head = 8192, 4096, 32, 32, 128
    windowed = build_from_config(MISTRAL, seq=s)
    full = build_from_config({**MISTRAL, "sliding_window": None}, seq=s)

    def attn(g):
        return sum(o.flops for o in g.ops if o.kind == "attention")

    # 4 FLOPs per (query, key) pair per head dimension (QK^T and PV), causal pairs with and without the window
    pairs_full, pairs_window = s * (s + 1) // 2, w * (w + 1) // 2 + (s - w) * w
    assert attn(full) - attn(windowed) == 4 * heads * d_head * (pairs_full - pairs_window) * layers
    # MistralConfig's default window (4096) when the key is absent; MixtralConfig's default is none
    assert config_to_transformer({k: v for k, v in MISTRAL.items() if k != "sliding_window"}).sliding_window == 4096
    assert config_to_transformer(MIXTRAL).sliding_window == 0


def test_window_patterns_from_each_class_rule():
    gemma = config_to_transformer({**GEMMA3_12B["text_config"], "sliding_window_pattern": 4})
    assert (gemma.sliding_window, gemma.global_every) == (1024, 4)
    assert [gemma.layer_window(i) for i in range(4)] == [1024, 1024, 1024, 0]
    # Qwen2 with use_sliding_window: layers from max_window_layers on are local (0: all of them)
    q = config_to_transformer({**QWEN2, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0})
    assert (q.sliding_window, q.global_every) == (4096, 0)
    assert config_to_transformer({**QWEN2, "sliding_window": 4096}).sliding_window == 0  # use_sliding_window off
    q = config_to_transformer({**QWEN2, "use_sliding_window": True, "max_window_layers": 24})
    assert q.sliding_window == 0  # max_window_layers >= layers: every layer global


@pytest.mark.parametrize(("config", "match"), [
    ({**QWEN2, "use_sliding_window": True, "max_window_layers": 12},
     r"max_window_layers: a local \(L\) / global \(G\) layer pattern not modelled; got G{12}L{12}; expected every "
     r"layer local, or layer i global exactly when \(i \+ 1\) % k == 0"),
    ({**GPT_OSS_120B, "layer_types": ["sliding_attention"] * 35},
     r"layer_types: not one attention type per layer; got .*; expected a list of 36 of 'full_attention' or "
     r"'sliding_attention'"),
    ({"model_type": "gemma3"}, r"text_config: missing for model_type 'gemma3'; got null; expected an object"),
    ({"model_type": "gemma3", "text_config": {**GEMMA3_12B["text_config"], "hidden_activation": "tanh"}},
     r"<config dict>: text_config: hidden_activation: unsupported gated activation; got \"tanh\""),
    ({**QWEN3_30B, "mlp_only_layers": [0, 1]}, r"mlp_only_layers: dense layers by index are not modelled"),
    ({**LLAMA4_MAVERICK["text_config"], "moe_layers": [0, 2]}, r"moe_layers: MoE layers other than every"),
    ({**DEEPSEEK_V3, "qk_rope_head_dim": 0}, r"qk_rope_head_dim: zero; got 0; expected a positive integer"),
    ({**GPT_OSS_120B, "model_type": "gpt-oss"}, r"unknown model_type 'gpt-oss'.*did you mean 'gpt_oss'\?"),
], ids=["qwen-pattern", "layer-types-length", "no-text-config", "gated-act", "mlp-only", "moe-layers", "rope-dim",
        "type-typo"])
def test_new_family_errors_are_located(config, match):
    with pytest.raises(HFConfigError, match=match) as e:
        config_to_transformer(config)
    assert "Traceback" not in str(e.value)

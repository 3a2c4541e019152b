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
    with pytest.raises(ValueError, match=r"torch_dtype: unknown dtype; got 'float33'.*did you mean 'float32'"):
        build_from_config({**gpt2, "torch_dtype": "float33"})

"""The MODEL argument: zoo names, micro-workloads and config files, and their located errors."""

from __future__ import annotations

import json

import pytest

from workloads.micro import build_micro, parse_micro
from workloads.resolve import load_workload


def test_micro_gemm_flops_and_bytes_by_hand():
    g = build_micro("gemm:m=4096,n=4096,k=4096")
    op = g.ops[0]
    assert op.flops == 2 * 4096**3
    assert (op.bytes_read, op.bytes_written) == (2 * 4096 * 4096 * 2, 4096 * 4096 * 2)  # bf16 default


def test_micro_attention_decode_with_gqa():
    g = build_micro("attention:b=2,h=32,s=1,d=128,kv_heads=8,s_kv=4096,causal=1")
    q, k, _ = g.ops[0].inputs
    assert q.shape == (2, 32, 1, 128) and k.shape == (2, 8, 4096, 128)
    assert g.flops == 2 * 32 * 4096 * (2 * 128 + 2 * 128)


def test_micro_copy_moves_its_bytes_and_conv_matches_by_hand():
    g = build_micro("copy:bytes=1048576", dtype="fp32")
    assert (g.ops[0].bytes_read, g.ops[0].bytes_written) == (1048576, 1048576)
    c = build_micro("conv2d:n=32,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1")
    assert c.macs == 32 * 64 * 56 * 56 * 64 * 9


@pytest.mark.parametrize("spec, message", [
    ("gemm:m=1,n=2", "missing k"),
    ("gemm:m=1,n=2,k=0", "k; got '0'; expected a positive integer"),
    ("gemm:m=1,n=2,k=1.5", "expected a positive integer"),
    ("gem:m=1", "did you mean 'gemm'"),
    ("gemm:m=1,n=2,k=3,kk=3", "did you mean 'k'"),
    ("elementwise:numel=3,op=gelo", "did you mean 'gelu'"),
    ("gemm:m=1,m=2,n=1,k=1", "given twice"),
    ("gemm:m=inf,n=2,k=2", "m; got 'inf'; expected a positive integer"),
    ("gemm:m=nan,n=2,k=2", "m; got 'nan'; expected a positive integer"),
    ("conv2d:n=1,c=3,h=8,w=8,k=4,r=3,s=3,pad=-1", "pad; got '-1'; expected an integer >= 0"),
])
def test_micro_errors_are_located(spec, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_micro(spec) if not spec.startswith("gem:") else build_micro(spec)
    assert spec in str(info.value)


def test_filter_larger_than_input_names_the_op():
    with pytest.raises(ValueError, match=r"op 'conv2d' \(conv2d\): filter larger than its \(padded\) input"):
        build_micro("conv2d:n=1,c=3,h=2,w=2,k=4,r=3,s=3")


def test_unknown_model_suggests_near_matches():
    with pytest.raises(KeyError, match="did you mean 'llama-2-7b'"):
        load_workload("lama-2-7b")


def test_learned_positions_bound_the_sequence():
    with pytest.raises(ValueError, match="exceeds its learned position table; got 2048 positions; expected at most"):
        load_workload("gpt2", seq=2048)
    assert load_workload("gpt2", phase="decode", context=1023).meta["context"] == 1023
    # the zoo's default decode context leaves the new token a row of the position table
    assert load_workload("gpt2", phase="decode").meta["context"] == 1023
    assert load_workload("gpt3-175b", phase="decode").meta["context"] == 2047
    assert load_workload("llama-2-7b", phase="decode").meta["context"] == 4096  # RoPE: its default seq


def test_phase_and_train_conflict():
    with pytest.raises(ValueError, match="--train conflicts with phase 'decode'"):
        load_workload("llama-2-7b", phase="decode", train=True)


def test_config_json_builds_the_same_model_as_the_zoo(tmp_path):
    cfg = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    g = load_workload(str(p), seq=512)
    z = load_workload("llama-2-7b", seq=512)
    assert g.params == z.params == 6_738_415_616
    assert g.flops == z.flops
    p.write_text("{bad")
    with pytest.raises(ValueError, match=r"config.json:1:2"):
        load_workload(str(p))


def test_missing_files_are_reported():
    with pytest.raises(FileNotFoundError, match="no such ONNX file"):
        load_workload("nothere.onnx")

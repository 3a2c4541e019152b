"""The serving-precision pass: quantised weights with group scales, fp8 KV cache, and its located errors."""

from __future__ import annotations

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from workloads.ir import Attrs, GraphBuilder, Role
from workloads.precision import QUANT_MATMUL, apply_precision, packed_weight_bytes, quant_operands
from workloads.resolve import load_workload
from workloads.serialize import graph_from_json

# llama-2-7b (d 4096, ffn 11008, 32 layers, vocab 32000): the linear layers of one block
_LAYER_LINEAR = 4096 * 12288 + 4096 * 4096 + 4096 * 22016 + 11008 * 4096  # qkv, out, gate_up, down
_QUANT = 32 * _LAYER_LINEAR  # 6,476,005,376 weights quantised
_KEPT = 32000 * 4096 * 2 + 65 * 4096  # embedding table, LM head, 65 RMSNorm weights: 16-bit


@pytest.fixture(scope="module")
def decode():
    return load_workload("llama-2-7b", phase="decode", context=4096)


def test_llama_int4_g128_weight_bytes_by_hand(decode):
    q = apply_precision(decode, weight_dtype="int4")
    assert decode.weight_bytes == 2 * (_QUANT + _KEPT)
    # packed int4 (0.5 B) + one fp16 scale per 128 weights (the 0.125 bit/weight of Marlin's README) + 16-bit rest
    want = _QUANT // 2 + (_QUANT // 128) * 2 + 2 * _KEPT
    assert want == 3_864_010_752
    assert q.weight_bytes == want
    info = q.meta["precision"]
    assert info["quantized_params"] == _QUANT and info["quantized_weights"] == 128
    assert info["scale_elements"] == _QUANT // 128
    assert tuple(info["kept_16bit"]) == ("lm_head.weight",)
    assert sum(op.kind == QUANT_MATMUL for op in q.ops) == 128
    assert q.op("lm_head.logits").kind == "matmul"


def test_int8_and_zero_points(decode):
    q8 = apply_precision(decode, weight_dtype="int8", group_size=64)
    assert q8.weight_bytes == _QUANT + (_QUANT // 64) * 2 + 2 * _KEPT
    qz = apply_precision(decode, weight_dtype="int4", zero_point=True)  # AWQ: a packed 4-bit zero per group
    assert qz.weight_bytes == _QUANT // 2 + (_QUANT // 128) * (2 + 0.5) + 2 * _KEPT
    op = qz.op("layers.0.mlp.down")
    ops = quant_operands(op)
    assert ops["scales"].shape == (11008 // 128, 4096) and ops["zeros"].shape == (86, 4096)
    assert packed_weight_bytes(op) == 11008 * 4096 // 2 + 86 * 4096 * 2 + 86 * 4096 // 2


def test_fp8_weights_per_channel_scales(decode):
    q = apply_precision(decode, weight_dtype="fp8")
    op = q.op("layers.0.attn.qkv")
    assert op.dtype.value == "fp8_e4m3" and quant_operands(op)["scales"].shape == (12288,)
    per_channel = 32 * (12288 + 4096 + 22016 + 4096)
    assert q.weight_bytes == _QUANT + 4 * per_channel + 2 * _KEPT


def test_fp8_kv_cache_halves_kv_bytes(decode):
    q = apply_precision(decode, kv_dtype="fp8")
    assert decode.role_bytes(Role.KV_CACHE) == 2 * 32 * 4096 * 4096 * 2  # K and V, 32 layers, 4096 x 4096, bf16
    assert q.role_bytes(Role.KV_CACHE) * 2 == decode.role_bytes(Role.KV_CACHE)
    assert q.weight_bytes == decode.weight_bytes
    att = q.op("layers.0.attn.core")
    assert att.inputs[1].dtype.value == "fp8_e4m3" and att.inputs[0].dtype.value == "bf16"
    pre = load_workload("llama-2-7b", phase="prefill", seq=512, kv_dtype="fp8_e5m2")
    base = load_workload("llama-2-7b", phase="prefill", seq=512)
    assert pre.role_bytes(Role.KV_CACHE) * 2 == base.role_bytes(Role.KV_CACHE) > 0


def test_no_options_is_identity_and_json_round_trip(decode):
    assert apply_precision(decode) is decode
    q = load_workload("gpt2", phase="decode", context=64, weight_dtype="int4", kv_dtype="fp8")
    back = graph_from_json(q.to_json())
    assert back.weight_bytes == q.weight_bytes and back.meta["precision"]["weight_dtype"] == "int4"


def test_group_minus_one_is_one_scale_per_column():
    b = GraphBuilder("lin", dtype="fp16")
    b.op("matmul", [b.input("x", (4, 96)), b.weight("w", (96, 40))], name="fc")
    q = apply_precision(b.build(), weight_dtype="int4", group_size=-1)
    assert quant_operands(q.op("fc"))["scales"].shape == (1, 40)
    assert q.weight_bytes == 96 * 40 // 2 + 40 * 2


@pytest.mark.parametrize(("kw", "match"), [
    ({"weight_dtype": "int3"}, r"unsupported dtype; got 'int3'.*did you mean"),
    ({"kv_dtype": "fp9"}, r"--kv-dtype: unsupported dtype; got 'fp9'"),
    ({"weight_dtype": "int4", "group_size": 100}, r"op 'layers.0.attn.out': --group-size 100 does not divide K=4096"),
    ({"weight_dtype": "int4", "group_size": 0}, r"--group-size: got 0"),
    ({"weight_dtype": "fp8", "group_size": 128}, r"fp8 weights have one fp32 scale per output channel"),
    ({"group_size": 64}, r"got no weight dtype"),
])
def test_bad_options_are_located(decode, kw, match):
    with pytest.raises(ValueError, match=match) as exc:
        apply_precision(decode, **kw)
    assert "\n" not in str(exc.value)


def test_refuses_fp32_training_and_cacheless_graphs():
    with pytest.raises(ValueError, match=r"activations are fp32; expected fp16 or bf16"):
        load_workload("llama-2-7b", phase="decode", context=8, dtype="fp32", weight_dtype="int4")
    with pytest.raises(ValueError, match=r"inference settings; got a training graph"):
        load_workload("gpt2", seq=64, train=True, weight_dtype="int8")
    with pytest.raises(ValueError, match=r"no KV cache; got phase 'forward'"):
        load_workload("gpt2", seq=64, phase="forward", kv_dtype="fp8")
    q = load_workload("gpt2", phase="decode", context=8, weight_dtype="int4")
    with pytest.raises(ValueError, match="precision is set already"):
        apply_precision(q, weight_dtype="int8")


def test_moe_experts_are_quantised_per_expert():
    g = load_workload("mixtral-8x7b", phase="decode", context=64)
    q = apply_precision(g, weight_dtype="int4")
    op = q.op("layers.0.moe.experts_in")
    assert op.kind == "quant_grouped_matmul"
    # w_in (8 experts, K 4096, N 2 x 14336): one fp16 scale per 128 weights of each expert's columns
    assert quant_operands(op)["scales"].shape == (8, 4096 // 128, 2 * 14336)
    assert q.op("layers.0.moe.router").kind == "moe_router"  # the gate stays 16-bit
    qp = q.meta["precision"]["quantized_params"]
    assert q.weight_bytes == qp // 2 + (qp // 128) * 2 + 2 * (g.params - qp)
    # an expert op reads the active experts' packed weights and scales only
    tokens, active = int(op.attrs["tokens"]), int(op.attrs["experts_active"])
    w, s = op.inputs[1], op.inputs[2]
    assert op.bytes_read == tokens * 4096 * 2 + (w.nbytes + s.nbytes) * active // 8


def test_malformed_quant_matmul_is_a_located_graph_error():
    from workloads.dtypes import DType
    from workloads.ir import GraphError, Op, OpGraph, TensorSpec

    x = TensorSpec("x", (4, 256), DType.BF16)
    w = TensorSpec("w", (256, 64), DType.INT4, Role.WEIGHT)
    bad = TensorSpec("w.scales", (3, 64), DType.FP16, Role.WEIGHT)  # 256 / 128 = 2 groups, not 3
    y = TensorSpec("y", (4, 64), DType.BF16)
    with pytest.raises(GraphError, match=r"op 'fc' \(quant_matmul\): quantisation tensor 'w.scales' has shape \(3, 64\); "
                                         r"expected \(2, 64\)"):
        OpGraph("g", [Op("fc", QUANT_MATMUL, (x, w, bad), (y,), Attrs({"group_size": 128, "zero_point": False}))])


"""Bad workload input through the real CLI: one located line (or a count line and located lines), exit 2.

Every case runs ``nodeperf`` in-process on an input built in ``tmp_path`` (Hugging Face configs,
micro-workload strings, ``--dtype`` values, ONNX files made with ``onnx.helper``, measurement CSVs) and
checks the contract of convention 6: exit code 2, no traceback, stderr starting ``nodeperf: error: ``,
exactly one line for one problem, and that line naming where (file, key or flag) and what was got.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator.cli import main
from tests.bad_input.contract import one_line, several
from workloads.hf import MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS

HW = ("--hardware", "h100-sxm5-80gb")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    _, err = capsys.readouterr()
    return rc, err


# ------------------------------------------------------------------------------------------------
# Hugging Face config.json

LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 2,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 11008,
         "max_position_embeddings": 4096, "hidden_act": "silu", "torch_dtype": "bfloat16"}
MIXTRAL = dict(LLAMA, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2)
GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 2, "n_head": 12, "n_positions": 1024}
BERT = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 2,
        "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512}
OPT = {"model_type": "opt", "vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 2,
       "num_attention_heads": 12, "ffn_dim": 3072, "max_position_embeddings": 2048}
VIT = {"model_type": "vit", "hidden_size": 768, "num_hidden_layers": 2, "num_attention_heads": 12,
       "intermediate_size": 3072, "image_size": 224, "patch_size": 16}

_DROP = object()  # a key to delete

# (base config, changes, the key named, the value as the line shows it)
CONFIG_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str, str]] = {
    "hidden-float": (LLAMA, {"hidden_size": 4096.5}, "hidden_size", "got 4096.5"),
    "hidden-integral-float": (LLAMA, {"hidden_size": 4096.0}, "hidden_size", "got 4096.0"),
    "hidden-string": (LLAMA, {"hidden_size": "4096"}, "hidden_size", 'got "4096"'),
    "hidden-list": (LLAMA, {"hidden_size": [4096]}, "hidden_size", "got [4096]"),
    "hidden-bool": (LLAMA, {"hidden_size": True}, "hidden_size", "got true"),
    "hidden-null": (LLAMA, {"hidden_size": None}, "hidden_size", "got null"),
    "hidden-nan": (LLAMA, {"hidden_size": float("nan")}, "hidden_size", "got NaN"),
    "hidden-absurd": (LLAMA, {"hidden_size": 10**9}, "hidden_size", "got 1000000000"),
    "heads-string": (LLAMA, {"num_attention_heads": "32"}, "num_attention_heads", 'got "32"'),
    "heads-zero": (LLAMA, {"num_attention_heads": 0}, "num_attention_heads", "got 0"),
    "heads-negative": (LLAMA, {"num_attention_heads": -32}, "num_attention_heads", "got -32"),
    "heads-not-dividing-hidden": (LLAMA, {"num_attention_heads": 33, "num_key_value_heads": 1},
                                  "num_attention_heads", "got 33"),
    "intermediate-float": (LLAMA, {"intermediate_size": 11008.5}, "intermediate_size", "got 11008.5"),
    "intermediate-zero": (LLAMA, {"intermediate_size": 0}, "intermediate_size", "got 0"),
    "intermediate-missing": (LLAMA, {"intermediate_size": _DROP}, "'intermediate_size'", "missing key"),
    "kv-string": (LLAMA, {"num_key_value_heads": "8"}, "num_key_value_heads", 'got "8"'),
    "kv-float": (LLAMA, {"num_key_value_heads": 8.5}, "num_key_value_heads", "got 8.5"),
    "kv-zero": (LLAMA, {"num_key_value_heads": 0}, "num_key_value_heads", "got 0"),
    "kv-negative": (LLAMA, {"num_key_value_heads": -1}, "num_key_value_heads", "got -1"),
    "kv-not-dividing-heads": (LLAMA, {"num_key_value_heads": 5}, "num_key_value_heads", "got 5"),
    "vocab-string": (LLAMA, {"vocab_size": "32000"}, "vocab_size", 'got "32000"'),
    "vocab-zero": (LLAMA, {"vocab_size": 0}, "vocab_size", "got 0"),
    "vocab-absurd": (LLAMA, {"vocab_size": 10**12}, "vocab_size", "got 1000000000000"),
    "positions-string": (LLAMA, {"max_position_embeddings": "4096"}, "max_position_embeddings", 'got "4096"'),
    "positions-zero": (LLAMA, {"max_position_embeddings": 0}, "max_position_embeddings", "got 0"),
    "layers-zero": (LLAMA, {"num_hidden_layers": 0}, "num_hidden_layers", "got 0"),
    "layers-negative": (LLAMA, {"num_hidden_layers": -2}, "num_hidden_layers", "got -2"),
    "layers-float": (LLAMA, {"num_hidden_layers": 2.0}, "num_hidden_layers", "got 2.0"),
    "layers-absurd": (LLAMA, {"num_hidden_layers": 1_000_000}, "num_hidden_layers", "got 1000000"),
    "head-dim-string": (LLAMA, {"head_dim": "x"}, "head_dim", 'got "x"'),
    "head-dim-zero": (LLAMA, {"head_dim": 0}, "head_dim", "got 0"),
    "tie-not-bool": (LLAMA, {"tie_word_embeddings": "no"}, "tie_word_embeddings", 'got "no"'),
    "act-not-string": (LLAMA, {"hidden_act": 3}, "hidden_act", "got 3"),
    "act-unknown": (LLAMA, {"hidden_act": "tanhh"}, "hidden_act", "got \"tanhh\""),
    "model-type-typo": (LLAMA, {"model_type": "lama"}, "model_type 'lama'", "did you mean 'llama'?"),
    "model-type-number": (LLAMA, {"model_type": 3}, "model_type", "got 3"),
    "model-type-missing": (LLAMA, {"model_type": _DROP}, "'model_type'", "missing key"),
    "torch-dtype-typo": (LLAMA, {"torch_dtype": "float33"}, "torch_dtype", "got 'float33'"),
    # the near match of the alias float64 named as the listed fp64 (it had suggested 'float64')
    "torch-dtype-typo-64": (LLAMA, {"torch_dtype": "float46"}, "torch_dtype",
                            "got 'float46'; expected one of fp64, fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2, fp4_e2m1, "
                            "fp8_e8m0, int64, "
                            "int32, int8, int4, bool; did you mean 'fp64'?"),
    "experts-string": (MIXTRAL, {"num_local_experts": "8"}, "num_local_experts", 'got "8"'),
    "experts-zero": (MIXTRAL, {"num_local_experts": 0, "num_experts_per_tok": 1}, "num_local_experts", "got 0"),
    "experts-absurd": (MIXTRAL, {"num_local_experts": 10**7}, "num_local_experts", "got 10000000"),
    "top-k-above-experts": (MIXTRAL, {"num_experts_per_tok": 9}, "num_experts_per_tok", "got 9"),
    "gpt2-layers-word": (GPT2, {"n_layer": "twelve"}, "n_layer", 'got "twelve"'),
    "gpt2-embd-float": (GPT2, {"n_embd": 768.0}, "n_embd", "got 768.0"),
    "gpt2-inner-float": (GPT2, {"n_inner": 2.5}, "n_inner", "got 2.5"),
    "bert-type-vocab-string": (BERT, {"type_vocab_size": "2"}, "type_vocab_size", 'got "2"'),
    "opt-projection-differs": (OPT, {"word_embed_proj_dim": 512}, "word_embed_proj_dim", "got 512"),
    "vit-patch-zero": (VIT, {"patch_size": 0}, "patch_size", "got 0"),
    "vit-patch-not-dividing": (VIT, {"patch_size": 15}, "patch_size", "got 15"),
    "vit-channels-string": (VIT, {"num_channels": "3"}, "num_channels", 'got "3"'),
    "vit-labels-negative": (VIT, {"num_labels": -3}, "num_labels", "got -3"),
    "too-many-params": (LLAMA, {"hidden_size": MAX_HIDDEN, "intermediate_size": MAX_INTERMEDIATE,
                                "num_hidden_layers": MAX_LAYERS, "num_key_value_heads": 32},
                        "too many parameters", "got about"),
}


def _config(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in changes.items():
        if v is _DROP:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize("case", list(CONFIG_CASES), ids=list(CONFIG_CASES))
def test_config_value(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    base, changes, key, got = CONFIG_CASES[case]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_config(base, changes)), encoding="utf-8")
    rc, err = run(capsys, "predict", str(p), *HW)
    one_line(rc, err, f"{p}: ", key, got)


# (file content, the part naming where, what was got)
CONFIG_FILES: dict[str, tuple[bytes, str, str]] = {
    "top-level-list": (b"[1, 2]", "top level", "got [1, 2]"),
    "top-level-number": (b"3", "top level", "got 3"),
    "top-level-string": (b'"llama"', "top level", 'got "llama"'),
    "top-level-null": (b"null", "top level", "got null"),
    "invalid-json": (b'{\n  "model_type": "gpt2",\n  "n_embd": 768,,\n}', "config.json:3:", "invalid JSON"),
    "truncated-json": (b'{"model_type": "llama", "hidden_size": 40', "config.json:1:", "invalid JSON"),
    "empty-file": (b"", "config.json:1:1", "empty file"),
    "not-utf8": (b'{"model_type": "\xff\xfe"}', "config.json:1:", "got byte 0xff"),
    "duplicate-key": (b'{"model_type": "llama", "hidden_size": 4096, "hidden_size": 1024}', "hidden_size",
                      "got 4096 and then 1024"),
    "huge-integer-literal": (b'{"model_type": "llama", "hidden_size": 1' + b"0" * 5000 + b"}", "config.json",
                             "more than 4300 digits"),
}


@pytest.mark.parametrize("case", list(CONFIG_FILES), ids=list(CONFIG_FILES))
def test_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    content, where, got = CONFIG_FILES[case]
    p = tmp_path / "config.json"
    p.write_bytes(content)
    rc, err = run(capsys, "predict", str(p), *HW)
    one_line(rc, err, str(tmp_path), where, got)


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"a":', "}")], ids=["lists", "objects"])
def test_deeply_nested_config_is_refused_without_recursion_error(tmp_path, capsys, opener, closer):
    p = tmp_path / "config.json"
    p.write_text(opener * 100_000 + ("1" if opener != "[" else "") + closer * 100_000, encoding="utf-8")
    rc, err = run(capsys, "predict", str(p), *HW)
    line = one_line(rc, err, "config.json")
    assert "RecursionError" not in line and "recursion" not in line.lower()


def test_absurd_layer_count_is_refused_before_building(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(LLAMA, num_hidden_layers=1_000_000)), encoding="utf-8")
    rc, err = run(capsys, "predict", str(p), *HW)
    one_line(rc, err, "num_hidden_layers", "got 1000000", f"<= {MAX_LAYERS:,}")


def test_config_with_several_problems_lists_each(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(LLAMA, hidden_size="4096", vocab_size=0, num_hidden_layers=2.5)), encoding="utf-8")
    rc, err = run(capsys, "predict", str(p), *HW)
    body = several(rc, err, 3, str(p))
    assert [k for k in ("hidden_size", "vocab_size", "num_hidden_layers") if any(f": {k}: " in ln for ln in body)] \
        == ["hidden_size", "vocab_size", "num_hidden_layers"]


def test_config_byte_order_mark_is_accepted(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(LLAMA).encode())
    rc, err = run(capsys, "predict", str(p), *HW)
    assert rc == 0, err


# ------------------------------------------------------------------------------------------------
# micro-workloads

# spec -> (the key or part named, what was got)
MICRO_CASES: dict[str, tuple[str, str]] = {
    "attention:b=1,h=2,s=64,d=64,causal=2": ("causal", "got '2'; expected 0 or 1"),
    "attention:b=1,h=2,s=64,d=64,bwd=yes": ("bwd", "got 'yes'; expected 0 or 1"),
    "attention:b=1,h=2,s=64,d=64,causal=1.0": ("causal", "got '1.0'"),
    "attention:b=1,h=2,s=64,d=64,causal=true": ("causal", "got 'true'"),
    "gemm:m=2,n=2,k=2,transpose=4": ("transpose", "got '4'"),
    "gemm:m=1.5,n=2,k=2": ("m", "got '1.5'"),
    "gemm:m=0,n=2,k=2": ("m", "got '0'"),
    "gemm:m=-3,n=2,k=2": ("m", "got '-3'"),
    "gemm:m=1e3,n=2,k=2": ("m", "got '1e3'"),
    "gemm:m=0x10,n=2,k=2": ("m", "got '0x10'"),
    "gemm:m=1_000,n=2,k=2": ("m", "got '1_000'"),
    "gemm:m=abc,n=2,k=2": ("m", "got 'abc'"),
    "gemm:m=,n=2,k=2": ("m", "got ''"),
    "gemm:m=2,n=2": ("missing k", "got m, n"),
    "gemm:m=2,m=3,n=2,k=2": ("'m' given twice", "got m='3'"),
    "gemm:m=2,n=2,k=2,q=3": ("bad item", "'q=3'"),
    "gemm:m=2,n=2,kk=2": ("bad item", "did you mean 'k'?"),
    "gemm:m=2,,n=2,k=2": ("item 2", "empty item"),
    "gemm:m=2,n=2,k=2,": ("item 4", "empty item"),
    "gemm:m,n=2,k=2": ("m: no value", "got 'm'"),
    "gemm:m=1000000000000000000000000000000,n=2,k=2": ("m", "got '1000000000000000000000000000000'"),
    "copy:bytes=1000000000000000000000000000000": ("bytes", "got '1000000000000000000000000000000'"),
    "copy:bytes=3": ("bytes", "got 3"),
    "gemm:m=16777216,n=16777216,k=1099511627776": ("tensor 'a' too large", "got 16777216 x 1099511627776"),
    "gem:m=2,n=2,k=2": ("unknown kind", "did you mean 'gemm'?"),
    "gemm": ("missing m, n, k", "got no keys"),
    "conv2d:n=1,c=4,h=8,w=8,k=4,r=3,s=3,stride=0": ("stride", "got '0'"),
    "conv2d:n=1,c=4,h=8,w=8,k=4,r=3,s=3,pad=-1": ("pad", "got '-1'"),
    "conv2d:n=1,c=3,h=8,w=8,k=4,r=3,s=3,groups=2": ("op 'conv2d'", "channels: input 3"),
    "attention:b=1,h=2,s=64,d=64,kv_heads=0": ("kv_heads", "got '0'"),
    "attention:b=1,h=2,s=64,d=64,kv_heads=3": ("op 'attention'", "key/value heads 3"),
    "elementwise:numel=10,op=ad": ("op", "did you mean 'add'?"),
    "elementwise:numel=10,op=": ("op", "got ''"),
    "gemm:m=2,n=2,k=2,dtype=": ("dtype", "got ''"),
    "gemm:m=2,n=2,k=2,dtype=bf61": ("dtype", "did you mean 'bf16'?"),
    "softmax:rows=2": ("missing cols", "got rows"),
    "layernorm:rows=2,cols=nan": ("cols", "got 'nan'"),
    "layernorm:rows=2,cols=inf": ("cols", "got 'inf'"),
}


@pytest.mark.parametrize("spec", list(MICRO_CASES))
def test_micro_workload(capsys: pytest.CaptureFixture[str], spec: str) -> None:
    part, got = MICRO_CASES[spec]
    rc, err = run(capsys, "predict", spec, *HW)
    one_line(rc, err, f"micro-workload {spec!r}", part, got)


def test_micro_workload_with_several_problems_lists_each(capsys):
    spec = "gemm:m=0,n=-1,k=x"
    rc, err = run(capsys, "predict", spec, *HW)
    body = several(rc, err, 3, f"micro-workload {spec!r}", each_names_where=True)
    assert [ln.split(": ")[1].split(";")[0] for ln in body] == ["m", "n", "k"]


# ------------------------------------------------------------------------------------------------
# --seq: the image side of a vision model

# (model, flags, the smallest side accepted, the op the build stops at) torchvision's Inception-v3 at 128
# pixels: the auxiliary classifier of the train phase pools Mixed_6e's 6x6 map to 1x1 before its 5x5 conv
# (299 is the least side for it: 298 leaves 16 -> 4 < 5); 75 is the least without it (Mixed_7a's 3x3 conv)
SEQ_CASES = [
    ("inception_v3", ("--train", "--seq", "128"), 299, "phase 'train'", "op 'AuxLogits.conv1.conv' (conv2d)"),
    ("inception_v3", ("--seq", "74"), 75, "phase 'forward'", "op 'Mixed_7a.branch3x3_2.conv' (conv2d)"),
    ("vgg16", ("--seq", "16"), 32, "phase 'forward'", "op 'features.pool17' (pool2d)"),
]


@pytest.mark.parametrize("model, flags, least, phase, op", SEQ_CASES, ids=[f"{c[0]}-{c[1][-1]}" for c in SEQ_CASES])
def test_image_side_too_small_names_the_flag(capsys, model, flags, least, phase, op):
    rc, err = run(capsys, "predict", model, *HW, *flags)
    default = {"inception_v3": 299, "vgg16": 224}[model]
    one_line(rc, err, f"model {model!r}: image side (seq, --seq): got {flags[-1]}; expected at least {least} for "
             f"{phase} (the model's input size is {default}): at {flags[-1]}, {op}")


def test_image_side_at_the_least_builds(capsys):
    for model, flags, least, _, _ in SEQ_CASES:
        assert main(["predict", model, *HW, *flags[:-1], str(least)]) == 0, capsys.readouterr().err
    capsys.readouterr()


# ------------------------------------------------------------------------------------------------
# --dtype

# (model kind, --dtype value, what the line shows)
DTYPE_CASES = [
    ("micro", "", "empty dtype; got ''"),
    ("zoo", "", "empty dtype; got ''"),
    ("config", "", "empty dtype; got ''"),
    ("micro", " ", "empty dtype; got ' '"),
    ("zoo", "bf61", "did you mean 'bf16'?"),
    ("config", "float17", "did you mean 'fp16'?"),  # the listed name, not the alias float16
    ("zoo", "float46", "expected one of fp64, fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2, fp4_e2m1, fp8_e8m0, int64, "
                       "int32, int8, int4, bool; did you mean 'fp64'?"),
    ("micro", "bf 16", "got 'bf 16'"),
]


@pytest.mark.parametrize("kind, value, shown", DTYPE_CASES,
                         ids=[f"{k}-{v.strip() or repr(v)}" for k, v, _ in DTYPE_CASES])
def test_dtype(tmp_path, capsys, kind, value, shown):
    if kind == "config":
        p = tmp_path / "config.json"
        p.write_text(json.dumps(LLAMA), encoding="utf-8")
        model = str(p)
    else:
        model = {"micro": "gemm:m=64,n=64,k=64", "zoo": "gpt2"}[kind]
    rc, err = run(capsys, "predict", model, *HW, "--dtype", value)
    one_line(rc, err, "dtype", shown)


def test_dtype_ignores_case_and_surrounding_blanks(capsys):
    rc, err = run(capsys, "predict", "gemm:m=64,n=64,k=64", *HW, "--dtype", " BF16 ")
    assert rc == 0, err


# ------------------------------------------------------------------------------------------------
# ONNX files


def _onnx_model(path: Path, *, opset: int = 17, x_dims: tuple[int, ...] = (1, 4), extra_input: bool = False,
                op: tuple[str, str] | None = None) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_dims))]
    if extra_input:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [0, 4]))
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], [0.5] * 12)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [x_dims[0], 3])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    imports = [helper.make_opsetid("", opset)]
    if op is not None:
        domain, op_type = op
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                 helper.make_node(op_type, ["h"], ["y"], name="custom", domain=domain)]
        imports.append(helper.make_opsetid(domain, 1))
    graph = helper.make_graph(nodes, "g", inputs, [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=imports), str(path))
    return path


ONNX_CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "opset-1": ({"opset": 1}, "opset", "got 1"),
    "opset-6": ({"opset": 6}, "opset", "got 6"),
    "opset-99": ({"opset": 99}, "opset", "got 99"),
    "zero-dim": ({"x_dims": (1, 0)}, "input 'x' axis 1", "got 0"),
    "negative-dim": ({"x_dims": (1, -4)}, "input 'x' axis 1", "got -4"),
    "zero-batch": ({"x_dims": (0, 4)}, "input 'x' axis 0", "got 0"),
    "unknown-op": ({"op": ("com.example", "FancyOp")}, "node 'custom' (FancyOp)", "domain 'com.example'"),
}


@pytest.mark.onnx
@pytest.mark.parametrize("case", list(ONNX_CASES), ids=list(ONNX_CASES))
def test_onnx_model(tmp_path, capsys, case):
    kw, part, got = ONNX_CASES[case]
    p = _onnx_model(tmp_path / "m.onnx", **kw)
    rc, err = run(capsys, "predict", str(p), *HW)
    one_line(rc, err, str(p), part, got)


ONNX_FILES: dict[str, tuple[bytes | None, str]] = {
    "random-bytes": (bytes(range(256)) * 3, "not an ONNX model"),
    "empty-file": (b"", "empty file; got 0 bytes"),
    "text-file": (b"hello, this is not a model\n", "not an ONNX model"),
    "directory": (None, "x.onnx"),
}


@pytest.mark.onnx
@pytest.mark.parametrize("case", list(ONNX_FILES), ids=list(ONNX_FILES))
def test_not_an_onnx_file(tmp_path, capsys, case):
    pytest.importorskip("onnx")
    content, got = ONNX_FILES[case]
    p = tmp_path / "x.onnx"
    if content is None:
        p.mkdir()
    else:
        p.write_bytes(content)
    rc, err = run(capsys, "predict", str(p), *HW)
    one_line(rc, err, str(p), got)


@pytest.mark.onnx
def test_onnx_empty_dtype(tmp_path, capsys):
    p = _onnx_model(tmp_path / "m.onnx")
    rc, err = run(capsys, "predict", str(p), *HW, "--dtype", "")
    one_line(rc, err, "dtype", "got ''")


@pytest.mark.onnx
def test_onnx_with_several_bad_inputs_lists_each(tmp_path, capsys):
    p = _onnx_model(tmp_path / "m.onnx", x_dims=(1, 0), extra_input=True)
    rc, err = run(capsys, "predict", str(p), *HW)
    body = several(rc, err, 2, str(p))
    assert "input 'x' axis 1" in body[0] and "input 'z' axis 0" in body[1]


# ------------------------------------------------------------------------------------------------
# measurement CSVs (`nodeperf validate` and `nodeperf calibrate`)

HEADER = "workload,device,dtype,median_s\n"
GOOD = '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,1e-05\n'

# (file content, the located part (after the file name), what was got)
CSV_CASES: dict[str, tuple[bytes | str, str, str]] = {
    "missing-column": ("workload,device,median_s\n\"gemm:m=64,n=64,k=64\",h100-sxm5-80gb,1e-5\n",
                       ":1: dtype: missing required column", "got columns workload, device, median_s"),
    "time-not-a-number": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,abc\n', ":2: median_s", "got 'abc'"),
    "time-negative": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,-1e-5\n', ":2: median_s", "got -1e-5"),
    "time-zero": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,0\n', ":2: median_s", "got 0"),
    "time-nan": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,nan\n', ":2: median_s", "got 'nan'"),
    "time-inf": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,inf\n', ":2: median_s", "got 'inf'"),
    "time-overflow": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,1e400\n', ":2: median_s", "got '1e400'"),
    "time-blank": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,\n', ":2: median_s", "got ''"),
    "min-above-median": ("workload,device,dtype,median_s,min_s\n"
                         '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,1e-5,2e-5\n', ":2: min_s", "got 2e-05"),
    "unknown-device": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80g,bf16,1e-5\n', ":2: device",
                       "did you mean 'h100-sxm5-80gb'?"),
    "unknown-zoo-workload": (HEADER + "resnet5O,h100-sxm5-80gb,bf16,1e-3\n", ":2: workload",
                             "did you mean 'resnet50'"),
    "unknown-micro-key": (HEADER + '"gemm:m=64,n=64,kk=64",h100-sxm5-80gb,bf16,1e-5\n', ":2: workload",
                          "did you mean 'k'?"),
    "unknown-micro-kind": (HEADER + '"gem:m=64,n=64,k=64",h100-sxm5-80gb,bf16,1e-5\n', ":2: workload",
                           "did you mean 'gemm'?"),
    "unknown-dtype": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf61,1e-5\n', ":2: dtype",
                      "did you mean 'bf16'?"),
    "bad-train-flag": ("workload,device,dtype,median_s,train\nresnet18,h100-sxm5-80gb,fp32,1e-3,2\n", ":2: train",
                       "got '2'"),
    "phase-typo": ("workload,device,dtype,median_s,phase\nresnet18,h100-sxm5-80gb,fp32,1e-3,foward\n", ":2: phase",
                   "did you mean 'forward'?"),
    "empty-file": ("", ":1:", "empty file"),
    "header-only": (HEADER, ":2:", "got only a header"),
    "not-utf8": (HEADER.encode() + b'"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,1e-5\xff\n', ": not UTF-8",
                 "got byte 0xff at offset 77 (line 2)"),
    "duplicate-id": ("id," + HEADER + "a," + GOOD + "a," + GOOD, ":3: id", "got 'a'"),
    "unterminated-quote": (HEADER + '"gemm:m=64,n=64,k=64,h100-sxm5-80gb,bf16,1e-5\n', ":2: (row)",
                           "unexpected end of data"),
    "too-few-fields": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb\n', ":2: (row)", "too few fields; got 2"),
    "too-many-fields": (HEADER + GOOD.rstrip("\n") + ",extra\n", ":2: (row)", "too many fields; got 5"),
    "field-too-large": (HEADER + '"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,' + "1" * 200_000 + "\n", ":2: (row)",
                        "field larger than field limit"),
}


@pytest.mark.parametrize("command", ["validate", "calibrate"])
@pytest.mark.parametrize("case", list(CSV_CASES), ids=list(CSV_CASES))
def test_measurement_csv(tmp_path, capsys, case, command):
    content, part, got = CSV_CASES[case]
    p = tmp_path / "runs.csv"
    p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    rc, err = run(capsys, command, str(p), *HW)
    one_line(rc, err, f"{p}{part}", got)


def test_measurement_csv_with_many_bad_rows_is_capped(tmp_path, capsys):
    p = tmp_path / "runs.csv"
    p.write_text(HEADER + "".join(f'"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,-{i + 1}\n' for i in range(30)),
                 encoding="utf-8")
    rc, err = run(capsys, "validate", str(p), *HW)
    body = several(rc, err, 30, str(p))
    assert body[0].endswith("got -1; expected a time > 0 s") and f"{p}:2: median_s" in body[0]


def test_measurement_csv_with_two_missing_columns_lists_both(tmp_path, capsys):
    p = tmp_path / "runs.csv"
    p.write_text('workload,median_s\n"gemm:m=64,n=64,k=64",1e-5\n', encoding="utf-8")
    rc, err = run(capsys, "validate", str(p), *HW)
    body = several(rc, err, 2, str(p))
    assert all(ln.startswith(f"  {p}:1: ") for ln in body)
    assert "device: missing required column" in body[0] and "dtype: missing required column" in body[1]


def test_measurement_csv_byte_order_mark_is_accepted(tmp_path, capsys):
    from simulator.calibration.measurements import MeasurementSet

    p = tmp_path / "runs.csv"
    p.write_bytes(b"\xef\xbb\xbf" + (HEADER + GOOD).encode())
    ms = MeasurementSet.load(p, devices=["h100-sxm5-80gb"])
    assert [m.workload for m in ms] == ["gemm:m=64,n=64,k=64"] and ms[0].median_s == 1e-5
    rc, err = run(capsys, "validate", str(p), *HW)
    assert rc == 0, err


def test_config_reader_itself_bounds_nesting_and_number_size(tmp_path):
    """The config reader refuses these on its own, whichever reader of the MODEL argument runs first."""
    from workloads.hf import MAX_JSON_DEPTH, HFConfigError, config_to_transformer

    p = tmp_path / "config.json"
    p.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(HFConfigError, match=rf"config\.json:1:{MAX_JSON_DEPTH + 1}: JSON nested too deeply"):
        config_to_transformer(p)
    p.write_text('{"model_type": "llama", "hidden_size": 1' + "0" * 5000 + "}", encoding="utf-8")
    with pytest.raises(HFConfigError, match=r"config\.json: invalid JSON: a number is too long"):
        config_to_transformer(p)


@pytest.mark.parametrize("flags, part", [
    (["--weight-dtype", "int4", "--group-size", "64"], "--group-size"),
    (["--framework", "eager"], "--framework eager"),
], ids=["group-size", "eager-framework"])
def test_plan_with_options_it_would_ignore_is_refused(capsys, flags, part):
    """A parallel plan builds its own per-stage graphs: options it cannot honour are errors, not silently dropped
    (--weight-dtype / --kv-dtype it honours: tests/simulator/cli/test_predict_plan_precision.py)."""

    rc = main(["predict", "llama-2-7b", "--hardware", "dgx-h100", "--tp", "2", "--phase", "decode", *flags])
    one_line(rc, capsys.readouterr().err, part, "parallel plan")


def test_plan_training_step_with_serving_precision_is_refused(capsys):
    rc = main(["predict", "llama-2-7b", "--hardware", "dgx-h100", "--tp", "2", "--train", "--kv-dtype", "fp8"])
    one_line(rc, capsys.readouterr().err, "--kv-dtype", "inference steps", "--train with a parallel plan")

"""Importers: ONNX and PyTorch graphs against the zoo (params, MACs), hand-built ONNX cases, errors and the CLI.

ResNet-50 is written here with torch.nn (the torchvision layout) and exported with the dynamo ONNX
exporter (offline, ``optimize=False`` so batch norms stay separate ops as in PyTorch). GPT-2 is built
by ``transformers`` from a ``GPT2Config`` on the meta device: no weights are allocated.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import warnings

import numpy as np
import pytest

from workloads.ir import UnsupportedOpError
from workloads.zoo import build_model

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_ONNX = importlib.util.find_spec("onnx") is not None
HAS_ONNXSCRIPT = importlib.util.find_spec("onnxscript") is not None
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnx is not installed")
needs_export = pytest.mark.skipif(not (HAS_TORCH and HAS_ONNX and HAS_ONNXSCRIPT),
                                  reason="torch, onnx and onnxscript are needed to export ONNX")
needs_hf = pytest.mark.skipif(not (HAS_TORCH and HAS_TRANSFORMERS), reason="torch and transformers are not installed")

RESNET50_PARAMS = 25_557_032  # torchvision resnet50 parameter count
GPT2_PARAMS = 124_439_808  # GPT-2 small, LM head tied to the token embedding


# ------------------------------------------------------------------------------------------------
# a ResNet-50 in plain torch.nn (torchvision is not used)


def _resnet50():
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int, down: bool) -> None:
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                               if down else None)

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages, cin = [], 64
            for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                blocks = []
                for i in range(n):
                    blocks.append(Bottleneck(cin, width, stride if i == 0 else 1, i == 0))
                    cin = width * 4
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            import torch

            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet50().eval()


@pytest.fixture(scope="module")
def zoo_resnet50():
    return build_model("resnet50", batch=1)


@pytest.fixture(scope="module")
def resnet50_onnx(tmp_path_factory):
    """ResNet-50 exported once per module by the dynamo exporter (works offline)."""
    import torch

    path = tmp_path_factory.mktemp("onnx") / "resnet50.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("torch").setLevel(logging.ERROR)
        torch.onnx.export(_resnet50(), (torch.randn(1, 3, 224, 224),), str(path), dynamo=True, optimize=False,
                          verbose=False)
    return path


# ------------------------------------------------------------------------------------------------
# cross-checks against the zoo


@pytest.mark.torch
@needs_torch
@pytest.mark.parametrize("method", ["export", "fx"])
def test_resnet50_through_torch_matches_zoo(method, zoo_resnet50):
    import torch

    from workloads.importers.torch_import import import_module

    with torch.device("meta"):
        model = _resnet50()
    g = import_module(model, (1, 3, 224, 224), method=method)
    assert g.params == sum(p.numel() for p in model.parameters()) == RESNET50_PARAMS == zoo_resnet50.params
    assert abs(g.macs - zoo_resnet50.macs) <= 1e-3 * zoo_resnet50.macs
    assert g.macs == zoo_resnet50.macs == 4_089_184_256  # 53 convolutions + the classifier
    kinds = [op.kind for op in g.ops]
    assert kinds.count("conv2d") == 53 and kinds.count("batchnorm") == 53 and kinds.count("matmul") == 1


@pytest.mark.torch
@pytest.mark.onnx
@needs_export
def test_resnet50_through_onnx_export_matches_zoo(resnet50_onnx, zoo_resnet50):
    from workloads.importers.onnx_import import import_onnx

    g = import_onnx(resnet50_onnx)
    assert g.params == RESNET50_PARAMS == zoo_resnet50.params  # running statistics are not parameters
    assert abs(g.macs - zoo_resnet50.macs) <= 1e-3 * zoo_resnet50.macs
    assert g.macs == zoo_resnet50.macs
    kinds = {op.kind for op in g.ops}
    # the exporter's zero-bias subgraphs (Shape -> Expand -> CastLike -> Expand) fold away
    assert kinds == {"conv2d", "batchnorm", "elementwise", "pool2d", "reduction", "reshape", "matmul"}
    assert all(op.kind != "elementwise" or op.attrs["op"] in ("relu", "add") for op in g.ops)
    assert g.op("node_conv2d").group == "conv1" and g.op("node_conv2d").inputs[1].name == "conv1.weight"


@pytest.mark.torch
@pytest.mark.onnx
@needs_export
def test_onnx_dtype_override_halves_weight_bytes(resnet50_onnx):
    from workloads.importers.onnx_import import import_onnx

    g = import_onnx(resnet50_onnx, dtype="bf16")
    assert g.weight_bytes == 2 * RESNET50_PARAMS
    with pytest.raises(ValueError, match="fixed batch dimension 1; got batch=8"):
        import_onnx(resnet50_onnx, batch=8)


@pytest.mark.torch
@needs_hf
def test_gpt2_from_config_on_meta_matches_zoo():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from workloads.importers.torch_import import import_module

    seq = 128
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.zeros((1, seq), dtype=torch.long, device="meta")
    g = import_module(model, (ids,), kwargs={"use_cache": False})
    zoo = build_model("gpt2", batch=1, seq=seq, phase="forward")
    assert g.params == GPT2_PARAMS == zoo.params  # lm_head.weight is tied to transformer.wte.weight
    assert abs(g.macs - zoo.macs) <= 0.01 * zoo.macs
    assert g.macs == zoo.macs == 15_964_274_688
    att = [op for op in g.ops if op.kind == "attention"]
    assert len(att) == 12 and all(op.attrs["causal"] for op in att)  # the constant mask is recognised as causal
    head = [op for op in g.ops if op.kind == "matmul" and op.inputs[1].name == "transformer.wte.weight"]
    assert len(head) == 1 and head[0].attrs["transpose_b"] and head[0].macs == seq * 768 * 50257


@pytest.mark.torch
@needs_hf
def test_gpt2_fx_fallback_counts_the_decomposed_attention():
    """make_fx decomposes SDPA into matmuls with an additive mask: all query-key pairs are counted."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from workloads.importers.torch_import import import_module

    cfg = GPT2Config(n_layer=2)
    seq = 64
    with torch.device("meta"):
        model = GPT2LMHeadModel(cfg).eval()
    ids = torch.zeros((1, seq), dtype=torch.long, device="meta")
    exported = import_module(model, (ids,), kwargs={"use_cache": False}, method="export")
    traced = import_module(model, (ids,), kwargs={"use_cache": False}, method="fx")
    assert traced.params == exported.params
    h, d = cfg.n_head, cfg.n_embd // cfg.n_head
    full, causal = seq * seq, seq * (seq + 1) // 2
    assert traced.macs - exported.macs == cfg.n_layer * h * (full - causal) * 2 * d


@pytest.mark.torch
@needs_torch
@pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")
def test_torch_lstm_params_and_macs_by_hand():
    import torch

    from workloads.importers.torch_import import import_module

    t, b, i, h = 10, 4, 16, 32
    m = torch.nn.LSTM(i, h, num_layers=2, batch_first=True).eval()
    g = import_module(m, (torch.empty(b, t, i),))
    assert g.params == sum(p.numel() for p in m.parameters()) == 4 * h * (i + h + 2) + 4 * h * (2 * h + 2)
    assert g.macs == t * b * 4 * h * (i + h) + t * b * 4 * h * (h + h)


@pytest.mark.torch
@needs_torch
def test_torch_unknown_op_strict_and_generic(caplog):
    import torch

    from workloads.importers.torch_import import import_module

    class Scan(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1) * 2

    with pytest.raises(UnsupportedOpError, match=r"Scan: node 'cumsum' \(aten.cumsum.default\): unsupported operator"):
        import_module(Scan(), (2, 8))
    with caplog.at_level(logging.WARNING):
        g = import_module(Scan(), (2, 8), strict=False)
    gen = [op for op in g.ops if op.kind == "generic"]
    assert len(gen) == 1 and gen[0].attrs["op_type"] == "aten.cumsum.default"
    assert gen[0].bytes_read == gen[0].bytes_written == 2 * 8 * 4
    assert "aten.cumsum.default" in caplog.text


# ------------------------------------------------------------------------------------------------
# hand-built ONNX models


def _save(model, path):
    import onnx

    onnx.save(model, str(path))
    return path


def _tiny_with(op_type: str, tmp_path, **attrs):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node(op_type, ["r"], ["y"], name="hm", **attrs)]
    g = helper.make_graph(nodes, "tiny", [x], [y])
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "tiny.onnx")


@pytest.mark.onnx
@needs_onnx
def test_onnx_unknown_op_strict_is_located(tmp_path):
    from workloads.importers.onnx_import import import_onnx

    path = _tiny_with("Hardmax", tmp_path)
    with pytest.raises(UnsupportedOpError) as ei:
        import_onnx(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}: node 'hm' (Hardmax): unsupported operator; expected one of ")
    assert "Conv" in msg and "\n" not in msg


@pytest.mark.onnx
@needs_onnx
def test_onnx_unknown_op_non_strict_becomes_generic_with_warning(tmp_path, caplog):
    from workloads.importers.onnx_import import import_onnx

    path = _tiny_with("Hardmax", tmp_path)
    with caplog.at_level(logging.WARNING, logger="workloads.importers.onnx_import"):
        g = import_onnx(path, strict=False)
    assert [op.kind for op in g.ops] == ["elementwise", "generic"]
    gen = g.op("hm")
    assert gen.attrs["op_type"] == "Hardmax" and gen.attrs["output_shapes"] == ((2, 8),)
    assert gen.attrs["output_dtypes"] == ("fp32",)
    assert gen.bytes_read == gen.bytes_written == 2 * 8 * 4 and gen.flops == 0
    assert "Hardmax (node 'hm')" in caplog.text
    assert g.meta["generic_ops"] == ("Hardmax:hm",)


@pytest.mark.onnx
@needs_onnx
@pytest.mark.parametrize("content", [b"this is not a protobuf \x00\xff\x13", b""])
def test_malformed_onnx_is_one_line_naming_the_file(tmp_path, content):
    from workloads.importers.onnx_import import import_onnx

    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(ValueError) as ei:
        import_onnx(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg and ("malformed" in msg or "invalid" in msg)


@pytest.mark.onnx
@needs_onnx
def test_onnx_shape_subgraph_folds_and_symbolic_batch_binds(tmp_path):
    """x (N,4,8) -> Reshape to (N,32) via Shape->Gather->Unsqueeze->Concat -> Gemm -> Relu -> MatMul (same weight^T)."""
    from onnx import TensorProto, helper, numpy_helper

    from workloads.importers.onnx_import import import_onnx

    w = numpy_helper.from_array(np.ones((32, 32), np.float32), "w")
    bias = numpy_helper.from_array(np.ones((32,), np.float32), "b")
    idx0 = numpy_helper.from_array(np.asarray(0, np.int64), "i0")
    rest = numpy_helper.from_array(np.asarray([32], np.int64), "rest")
    ax0 = numpy_helper.from_array(np.asarray([0], np.int64), "ax0")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["n"], name="gather_n", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "rest"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Gemm", ["flat", "w", "b"], ["h"], name="fc", transB=1),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Transpose", ["w"], ["wt"], name="w_t", perm=[1, 0]),
        helper.make_node("MatMul", ["r", "wt"], ["y"], name="proj"),
    ]
    g = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 32])],
                          [w, bias, idx0, rest, ax0])
    path = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fold.onnx")
    graph = import_onnx(path, batch=4)
    assert [(op.name, op.kind) for op in graph.ops] == [
        ("reshape", "reshape"), ("fc", "matmul"), ("relu", "elementwise"), ("proj", "matmul")]
    assert graph.op("reshape").outputs[0].shape == (4, 32)
    assert graph.params == 32 * 32 + 32  # w is used twice (once transposed) and counted once
    assert graph.op("proj").inputs[1].name == "w" and graph.op("proj").attrs["transpose_b"]
    assert graph.macs == 2 * 4 * 32 * 32
    assert graph.flops == 2 * (2 * 4 * 32 * 32) + 4 * 32 + 4 * 32  # two GEMMs, bias add, relu
    assert graph.meta["batch"] == 4
    assert import_onnx(path).op("reshape").outputs[0].shape == (1, 32)  # batch defaults to 1


@pytest.mark.onnx
@needs_onnx
def test_onnx_lstm_by_hand(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    from workloads.importers.onnx_import import import_onnx

    t, b, i, h = 5, 3, 8, 16
    inits = [numpy_helper.from_array(np.zeros(s, np.float32), n)
             for n, s in (("W", (1, 4 * h, i)), ("R", (1, 4 * h, h)), ("B", (1, 8 * h)))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Y_h"], name="lstm", hidden_size=h)
    g = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, b, i])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [t, 1, b, h])], inits)
    graph = import_onnx(_save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "rnn.onnx"))
    assert graph.params == 4 * h * i + 4 * h * h + 8 * h
    assert graph.macs == t * b * 4 * h * (i + h)
    assert graph.tensors["Y"].shape == (t, 1, b, h)


@pytest.mark.torch
@pytest.mark.onnx
@needs_export
def test_cli_graph_json_on_an_onnx_file(resnet50_onnx, zoo_resnet50, capsys):
    from simulator.cli import main

    assert main(["graph", str(resnet50_onnx), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == RESNET50_PARAMS and out["macs"] == zoo_resnet50.macs
    assert out["meta"]["source"] == "onnx"


@pytest.mark.onnx
@needs_onnx
def test_cli_graph_on_malformed_onnx_is_exit_2(tmp_path, capsys):
    from simulator.cli import main

    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x01garbage")
    assert main(["graph", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nodeperf: error: {path}: ") and err.count("\n") == 1

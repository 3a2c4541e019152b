"""What PaddlePaddle's O1 rewrite keeps in fp32 in DeepLearningExamples' BERT programs (pub-087, pub-089), op by op
(docs/accuracy.md, "PaddlePaddle's O1 program, op by op").

``rewrite_program`` with ``custom_white_list=['softmax', 'layer_norm', 'gelu']``: matmuls, layer norms, softmax and
GELU are white (fp16), the gray elementwise ops between them are fed by white ops (fp16), and only the embedding
lookups (``lookup_table_v2``, on the default black list) and the gray adds that sum them run in fp32, before one cast
into the white layer norm. The parameters stay fp32: each step casts every linear weight and bias to fp16 and each
weight gradient back.
"""

from __future__ import annotations

import pytest

from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, o1_fp32_embeddings_stated
from simulator.calibration.validation import DEFAULT_DATASET, known_devices
from workloads.dtypes import DType
from workloads.ir import Role

B, S, H, FF, VOCAB = 32, 384, 1024, 4096, 30522


@pytest.fixture(scope="module")
def rows():
    return {m.id: m for m in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}


@pytest.fixture(scope="module")
def step(rows):
    return GraphCache().get(rows["pub-087"])


def test_only_the_o1_rows_state_fp32_embeddings(rows):
    assert sorted(i for i, m in rows.items() if o1_fp32_embeddings_stated(m.notes)) == ["pub-087", "pub-089"]


def test_one_layer_of_the_o1_step_is_fp16_but_its_fp32_parameters(step):
    # every activation of an encoder layer's forward is fp16 (layer_norm and gelu white through the custom list, the
    # bias adds, dropouts and residual adds gray and fed by white ops); what is fp32 is the parameters the casts read
    fwd = [op for op in step.ops if op.name.startswith("layers.0.") and ".bwd" not in op.name
           and not op.name.endswith("grad_view")]
    acts = {t.name: t for op in fwd for t in (*op.inputs, *op.outputs) if t.role != Role.WEIGHT}
    assert acts and {t.dtype for t in acts.values()} == {DType.FP16}
    weights = {t.name: t for op in fwd for t in op.inputs if t.role == Role.WEIGHT and t.dtype is DType.FP32}
    # fused QKV, output, up and down projections with their biases, hand-counted
    per_layer = (H * 3 * H + 3 * H) + (H * H + H) + (H * FF + FF) + (FF * H + H)
    assert per_layer == 12_592_128
    assert sum(t.numel for t in weights.values()) == per_layer
    casts = [op for op in fwd if op.attrs.get("op") == "cast"]
    assert len(casts) == 8
    # each forward cast reads 4 bytes and writes 2 per element: 75,552,768 bytes a layer, and as much again for the
    # weight gradients cast back to fp32 in the backward
    moved = sum(op.inputs[0].numel * (op.inputs[0].dtype.bits + op.outputs[0].dtype.bits) // 8 for op in casts)
    assert moved == 6 * per_layer == 75_552_768
    back = [op for op in step.ops if op.name.startswith("layers.0.") and op.name.endswith(".bwd")
            and op.attrs.get("op") == "cast"]
    assert sum(op.inputs[0].numel * 6 for op in back) == 75_552_768
    assert {(op.inputs[0].dtype, op.outputs[0].dtype) for op in back} == {(DType.FP16, DType.FP32)}


def test_the_embeddings_run_in_fp32_before_one_cast_into_the_layer_norm(step):
    ops = {op.name: op for op in step.ops}
    for name in ("embed.tokens", "embed.positions", "embed.token_types"):
        table = next(t for t in ops[name].inputs if t.role == Role.WEIGHT)
        assert table.dtype is DType.FP32 and ops[name].outputs[0].dtype is DType.FP32
    assert ops["embed.tokens"].inputs[1].numel * 4 == VOCAB * H * 4 == 125_018_112
    for name in ("embed.add_positions", "embed.add_token_types"):
        assert ops[name].outputs[0].dtype is DType.FP32
    cast = ops["embed.norm.cast_fp16"]
    assert cast.attrs.get("op") == "cast" and ops["embed.norm"].inputs[0] is cast.outputs[0]
    x, y = cast.inputs[0], cast.outputs[0]
    assert (x.numel * 4, y.numel * 2) == (B * S * H * 4, B * S * H * 2) == (50_331_648, 25_165_824)
    assert ops["embed.norm"].outputs[0].dtype is DType.FP16
    # the backward casts the layer norm's input gradient back to fp32; the tables' gradients and updates are fp32,
    # without a master copy (4 operands: parameter, gradient, two moments)
    assert ops["embed.norm.cast_fp16.bwd"].outputs[0].dtype is DType.FP32
    assert ops["embed.tokens.bwd"].outputs[0].dtype is DType.FP32
    upd = ops["optimizer.embed.tokens.weight"]
    assert len(upd.inputs) == 4 and {t.dtype for t in upd.inputs} == {DType.FP32}
    # one cast more in the forward and its gradient in the backward, nothing else
    assert sum(1 for op in step.ops if op.attrs.get("op") == "cast") == 2 * 196 + 2


def test_the_transform_takes_a_forward_graph_only(step):
    from workloads.frameworks import o1_fp32_embeddings

    with pytest.raises(ValueError, match="expected a forward graph"):
        o1_fp32_embeddings(step)

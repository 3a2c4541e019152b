"""GNMT, DLRM and the Stable Diffusion 1.5 UNet: parameter and MAC counts derived by hand or published."""

from __future__ import annotations

import pytest

from workloads.dtypes import DType
from workloads.ir import Attrs, GraphError, Op, OpGraph, Role, TensorSpec
from workloads.semantics import check_op
from workloads.zoo import build_model
from workloads.zoo.rnn import gnmt_param_count

# ------------------------------------------------------------------------------------------------
# GNMT (no published total found for the 8+8 layout: hand-derived, PyTorch LSTM = W_ih, W_hh, b_ih, b_hh)

H, V = 1024, 32000


def test_gnmt_params_by_hand() -> None:
    uni = 4 * H * (H + H) + 8 * H  # 8,396,800: LSTM with 1024 inputs
    wide = 4 * H * (2 * H + H) + 8 * H  # 12,591,104: LSTM with 2048 inputs
    encoder = 2 * uni + wide + 6 * uni  # bidirectional layer 0, layer 1 over 2H, layers 2..7
    decoder = uni + 7 * wide  # attention LSTM, then 7 layers over [x; context]
    attention = H * H + H * H + H + 1 + H  # linear_q, linear_k, linear_att, normalize_scalar, normalize_bias
    classifier = H * V + V
    embedding = V * H  # shared by encoder and decoder
    total = encoder + decoder + attention + classifier + embedding
    assert total == 243_967_233
    assert build_model("gnmt", batch=2, seq=4).params == total == gnmt_param_count(8, H, V)


def test_gnmt_four_layers() -> None:
    # the MLPerf reference depth: 16,793,600 + 12,591,104 + 2 x 8,396,800 (encoder) + 8,396,800 + 3 x 12,591,104
    # (decoder) + 2,099,201 (attention) + 32,800,000 (classifier) + 32,768,000 (embedding)
    assert build_model("gnmt", layers=4, batch=2, seq=4).params == 160_015_617


def test_gnmt_macs_by_hand() -> None:
    b, t = 3, 7
    enc = t * b * (2 * 4 * H * 2 * H + 4 * H * 3 * H + 6 * 4 * H * 2 * H)
    dec = t * b * (4 * H * 2 * H + 7 * 4 * H * 3 * H)
    attn = 2 * t * b * H * H + 2 * b * t * t * H  # query/key projections; scores and context
    cls = t * b * H * V
    g = build_model("gnmt", batch=b, seq=t)
    assert g.macs == enc + dec + attn + cls
    assert g.op("decoder.classifier.classifier").outputs[0].shape == (t, b, V)


def test_gnmt_train_has_one_loss() -> None:
    g = build_model("gnmt", batch=2, seq=5, phase="train")
    loss = [op for op in g if op.kind == "cross_entropy"]
    assert len(loss) == 1 and loss[0].inputs[0].shape == (10, V)
    assert any(op.attrs.get("op") == "dropout" for op in g)


# ------------------------------------------------------------------------------------------------
# DLRM (MLPerf Criteo Terabyte; hand-derived: the "25+ billion" figures in print are not exact)

ROWS = [39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208,
        11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36]


def test_dlrm_params_by_hand() -> None:
    tables = sum(ROWS) * 128
    assert sum(ROWS) == 187_767_399 and tables == 24_034_227_072
    bottom = (13 * 512 + 512) + (512 * 256 + 256) + (256 * 128 + 128)
    top_in = 128 + 27 * 26 // 2  # dense vector + 351 pairwise dots = 479
    top = (top_in * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 512 + 512) + (512 * 256 + 256) + (256 + 1)
    assert (bottom, top) == (171_392, 2_197_505)
    assert build_model("dlrm", batch=8).params == tables + bottom + top == 24_036_595_969


def test_dlrm_macs_and_shapes() -> None:
    per_sample = (13 * 512 + 512 * 256 + 256 * 128) + (479 * 1024 + 1024 * 1024 + 1024 * 512 + 512 * 256 + 256) \
        + 27 * 27 * 128  # MLPs + the full 27x27 dot product matrix
    g = build_model("dlrm", batch=16)
    assert g.macs == 16 * per_sample
    assert g.op("interact.concat").outputs[0].shape == (16, 479)
    assert [t.shape for t in g.outputs] == [(16, 1)]


def test_dlrm_lookups_scale_gather_bytes() -> None:
    one, four = build_model("dlrm", batch=8, seq=1), build_model("dlrm", batch=8, seq=4)
    bag1, bag4 = one.op("emb_l.0.bag"), four.op("emb_l.0.bag")
    assert bag4.bytes_read - 8 * 4 * 8 == 4 * (bag1.bytes_read - 8 * 1 * 8)  # rows touched; int64 ids aside
    assert bag1.bytes_read == 8 * 8 + 8 * 128 * 4


# ------------------------------------------------------------------------------------------------
# Stable Diffusion 1.5 UNet

SD15_PARAMS = 859_520_964  # diffusers ModelMixin.num_parameters docstring: UNet2DConditionModel of stable-diffusion-v1-5


@pytest.fixture(scope="module")
def unet():
    return build_model("sd15-unet")


def test_unet_params_published(unet: OpGraph) -> None:
    assert unet.params == SD15_PARAMS


def test_unet_shapes(unet: OpGraph) -> None:
    assert unet.op("conv_in").inputs[0].shape == (1, 4, 64, 64)
    assert [t.shape for t in unet.outputs] == [(1, 4, 64, 64)]
    assert unet.op("mid_block.attentions.0.transformer_blocks.0.attn2.sdpa").inputs[1].shape == (1, 8, 77, 160)
    assert unet.meta["latent_size"] == 64 and unet.weight_bytes == 2 * SD15_PARAMS  # fp16 default


def test_unet_attention_macs_by_hand(unet: OpGraph) -> None:
    # per transformer block: self-attention S^2 * 2C and cross-attention S * 77 * 2C (heads x head dim = C);
    # 5 blocks at 64x64 (C=320), 32x32 (640), 16x16 (1280) (2 down + 3 up each), 1 in the middle at 8x8
    def block(s: int, c: int) -> int:
        return s * s * 2 * c + s * 77 * 2 * c

    expected = 5 * block(64 * 64, 320) + 5 * block(32 * 32, 640) + 5 * block(16 * 16, 1280) + block(8 * 8, 1280)
    assert expected == 63_026_135_040
    assert sum(op.macs for op in unet if op.kind == "attention") == expected


def test_unet_latent_from_image_size() -> None:
    g = build_model("sd15-unet", seq=768, batch=2)
    assert g.op("conv_in").inputs[0].shape == (2, 4, 96, 96)
    assert g.params == SD15_PARAMS
    with pytest.raises(ValueError, match="expected a multiple of 64"):
        build_model("sd15-unet", seq=500)


def test_unet_train_loss() -> None:
    g = build_model("sd15-unet", phase="train", seq=256)
    loss = g.op("loss")
    assert loss.kind == "mse_loss" and loss.flops == 3 * 4 * 32 * 32
    assert [t.shape for t in g.outputs] == [(1,)]


def test_unet_aliases() -> None:
    assert build_model("sd-unet", seq=128).params == SD15_PARAMS


# ------------------------------------------------------------------------------------------------
# semantics kinds added for these models


def _op(kind: str, inputs: list[TensorSpec], out_shape: tuple[int, ...], **attrs: object) -> Op:
    return Op("x", kind, tuple(inputs), (TensorSpec("y", out_shape, DType.FP32),), Attrs(attrs))


def test_groupnorm_semantics() -> None:
    x = TensorSpec("x", (2, 64, 4, 4), DType.FP32)
    gamma = TensorSpec("gamma", (64,), DType.FP32, Role.WEIGHT)
    beta = TensorSpec("beta", (64,), DType.FP32, Role.WEIGHT)
    op = _op("groupnorm", [x, gamma, beta], x.shape, groups=32)
    check_op(op)
    assert op.flops == 8 * 2 * 64 * 16 and op.params == 128
    with pytest.raises(GraphError, match="groups"):
        check_op(_op("groupnorm", [x], x.shape, groups=48))


def test_mse_loss_semantics() -> None:
    a = TensorSpec("a", (3, 5), DType.FP32)
    op = _op("mse_loss", [a, a], (1,))
    check_op(op)
    assert op.flops == 3 * 15
    with pytest.raises(GraphError, match="equal shapes"):
        check_op(_op("mse_loss", [a, TensorSpec("b", (5, 3), DType.FP32)], (1,)))


@pytest.mark.parametrize("model,kw", [("gnmt", {"seq": 6}), ("dlrm", {}), ("sd15-unet", {"seq": 128}),
                                      ("inception_v3", {})])
def test_json_round_trip(model: str, kw: dict) -> None:
    from workloads.serialize import graph_from_json

    g = build_model(model, phase="train", batch=2, **kw)
    h = graph_from_json(g.to_json())
    assert (h.params, h.flops, h.macs, len(h)) == (g.params, g.flops, g.macs, len(g))

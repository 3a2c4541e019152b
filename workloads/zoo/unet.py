"""Zoo builder for the Stable Diffusion 1.5 denoising UNet (one denoising step, text-conditioned).

The layout is diffusers' ``UNet2DConditionModel`` with the SD1.5 configuration (``data/unet.toml``):
sinusoidal timestep projection and a two-layer time MLP; ResNet blocks of group-norm, SiLU and 3x3
convolutions with a per-block time projection; transformer blocks (group-norm, 1x1 conv projections,
self-attention, cross-attention to the text context, GEGLU feed-forward, each after a layer-norm)
after every ResNet block of the cross-attention levels and in the middle; strided-conv downsampling,
nearest-neighbour upsampling followed by a 3x3 conv, and skip connections concatenated on the way up.

``seq`` is the *image* side in pixels (default 512); the latent side is ``seq / vae_scale_factor``
(64). The transformer blocks use the IR kinds directly (attention, layernorm, matmul, elementwise);
splitting channels into heads is represented as a reshape, the strided view fused attention kernels
consume. ``phase="train"`` adds the denoising objective: the mean squared error between the predicted
and the true noise (``mse_loss``).

Example
-------
>>> from workloads.zoo import build_model
>>> g = build_model("sd15-unet")
>>> g.params, g.outputs[0].shape
(859520964, (1, 4, 64, 64))
"""

from __future__ import annotations

from typing import Any

from workloads.ir import OpGraph, TensorSpec
from workloads.zoo import ModelEntry, load_data, register_model
from workloads.zoo._blocks import Net

__all__ = ["build_sd_unet"]

_DATA = "unet.toml"


def _resnet(net: Net, x: TensorSpec, temb: TensorSpec, out: int, groups: int) -> TensorSpec:
    """ResnetBlock2D: GN-SiLU-conv3x3, + Linear(SiLU(temb)), GN-SiLU-conv3x3, 1x1 shortcut if widths differ."""
    b, c, hh, ww = x.shape
    h = net.act(net.groupnorm(x, groups, "norm1"), "silu")
    h = net.conv(h, out, 3, padding=1, bias=True, name="conv1")
    t = net.linear(net.act(temb, "silu", "temb_silu"), out, name="time_emb_proj")
    h = net.add(h, net.reshape(t, (b, out, 1, 1), name="temb_4d"), name="add_temb")
    h = net.act(net.groupnorm(h, groups, "norm2"), "silu")
    h = net.dropout(h)
    h = net.conv(h, out, 3, padding=1, bias=True, name="conv2")
    short = net.conv(x, out, 1, bias=True, name="conv_shortcut") if c != out else x
    return net.add(short, h, name="residual")


def _mha(net: Net, q_in: TensorSpec, kv_in: TensorSpec, heads: int, name: str) -> TensorSpec:
    """Multi-head attention (no q/k/v bias, biased output projection) of q_in over kv_in."""
    b, s, c = q_in.shape
    skv = kv_in.shape[1]
    d = c // heads
    with net.group(name):
        q = net.linear(q_in, c, bias=False, name="to_q")
        k = net.linear(kv_in, c, bias=False, name="to_k")
        v = net.linear(kv_in, c, bias=False, name="to_v")
        q = net.reshape(q, (b, heads, s, d), name="q_heads")
        k = net.reshape(k, (b, heads, skv, d), name="k_heads")
        v = net.reshape(v, (b, heads, skv, d), name="v_heads")
        o = net.b.op("attention", [q, k, v], name="sdpa")
        o = net.reshape(o, (b, s, c), name="merge_heads")
        return net.linear(o, c, name="to_out.0")


def _transformer(net: Net, x: TensorSpec, ctx: TensorSpec, heads: int, groups: int, ff_mult: int) -> TensorSpec:
    """Transformer2DModel with one BasicTransformerBlock (conv 1x1 in/out projections)."""
    b, c, hh, ww = x.shape
    h = net.groupnorm(x, groups, "norm")
    h = net.conv(h, c, 1, bias=True, name="proj_in")
    h = net.b.op("transpose", [h], name="to_tokens", perm=(0, 2, 3, 1))
    h = net.reshape(h, (b, hh * ww, c), name="tokens")
    with net.group("transformer_blocks.0"):
        n = net.layernorm(h, "norm1")
        h = net.add(h, _mha(net, n, n, heads, "attn1"), name="add_attn1")
        n = net.layernorm(h, "norm2")
        h = net.add(h, _mha(net, n, ctx, heads, "attn2"), name="add_attn2")
        n = net.layernorm(h, "norm3")
        with net.group("ff"):
            inner = ff_mult * c
            p = net.linear(n, 2 * inner, name="net.0.proj")  # GEGLU: value and gate halves
            val, gate = net.b.op("split", [p], name="chunk", axis=-1, sizes=(inner, inner))
            f = net.binary("mul", val, net.act(gate, "gelu"), name="geglu")
            f = net.linear(f, c, name="net.2")
        h = net.add(h, f, name="add_ff")
    h = net.reshape(h, (b, hh, ww, c), name="untokens")
    h = net.b.op("transpose", [h], name="to_nchw", perm=(0, 3, 1, 2))
    h = net.conv(h, c, 1, bias=True, name="proj_out")
    return net.add(h, x, name="residual")


def _timestep_embedding(net: Net, batch: int, proj_dim: int, embed_dim: int) -> TensorSpec:
    """Sinusoidal projection of the timestep (fp32), then Linear-SiLU-Linear in the model dtype."""
    half = proj_dim // 2
    with net.group("time_proj"):
        t = net.input("timesteps", (batch, 1), "fp32")
        freqs = net.input("time_proj.frequencies", (1, half), "fp32")  # exp(-ln(10000) i / half): a constant
        arg = net.binary("mul", t, freqs, name="angles")
        emb = net.concat([net.act(arg, "cos"), net.act(arg, "sin")], axis=1)  # flip_sin_to_cos
        if net.b.dtype.value != "fp32":
            emb = net.b.op("elementwise", [emb], name="cast", op="cast", out_dtype=net.b.dtype)
    with net.group("time_embedding"):
        e = net.linear(emb, embed_dim, name="linear_1")
        return net.linear(net.act(e, "silu"), embed_dim, name="linear_2")


def build_sd_unet(name: str, *, batch: int, seq: int, phase: str, dtype: str, **_: Any) -> OpGraph:
    """SD1.5 UNet2DConditionModel for ``seq x seq`` images (latents ``seq / 8``), one denoising step."""
    cfg = load_data(_DATA)["sd15_unet"]
    scale = int(cfg["vae_scale_factor"])
    widths = [int(c) for c in cfg["block_out_channels"]]
    levels = len(widths)
    multiple = scale * 2 ** (levels - 1)
    if seq % multiple:
        raise ValueError(f"model {name!r}: seq (image side) {seq}; expected a multiple of {multiple} "
                         f"(VAE factor {scale} x {levels - 1} UNet downsamplings)")
    latent = seq // scale
    groups, heads, per = int(cfg["norm_groups"]), int(cfg["heads"]), int(cfg["layers_per_block"])
    xattn = [bool(a) for a in cfg["cross_attention"]]
    ff_mult = int(cfg["ff_mult"])
    net = Net(name, dtype=dtype, phase=phase)

    sample = net.input("sample", (batch, int(cfg["latent_channels"]), latent, latent))
    ctx = net.input("encoder_hidden_states", (batch, int(cfg["context_tokens"]), int(cfg["cross_attention_dim"])))
    temb = _timestep_embedding(net, batch, int(cfg["time_proj_dim"]), int(cfg["time_embed_dim"]))

    x = net.conv(sample, widths[0], 3, padding=1, bias=True, name="conv_in")
    skips = [x]
    for lvl, width in enumerate(widths):
        for j in range(per):
            with net.group(f"down_blocks.{lvl}.resnets.{j}"):
                x = _resnet(net, x, temb, width, groups)
            if xattn[lvl]:
                with net.group(f"down_blocks.{lvl}.attentions.{j}"):
                    x = _transformer(net, x, ctx, heads, groups, ff_mult)
            skips.append(x)
        if lvl < levels - 1:
            with net.group(f"down_blocks.{lvl}.downsamplers.0"):
                x = net.conv(x, width, 3, stride=2, padding=1, bias=True, name="conv")
            skips.append(x)

    with net.group("mid_block.resnets.0"):
        x = _resnet(net, x, temb, widths[-1], groups)
    with net.group("mid_block.attentions.0"):
        x = _transformer(net, x, ctx, heads, groups, ff_mult)
    with net.group("mid_block.resnets.1"):
        x = _resnet(net, x, temb, widths[-1], groups)

    for i, width in enumerate(reversed(widths)):
        lvl = levels - 1 - i
        for j in range(per + 1):
            with net.group(f"up_blocks.{i}.resnets.{j}"):
                x = net.concat([x, skips.pop()], axis=1, name="cat_skip")
                x = _resnet(net, x, temb, width, groups)
            if xattn[lvl]:
                with net.group(f"up_blocks.{i}.attentions.{j}"):
                    x = _transformer(net, x, ctx, heads, groups, ff_mult)
        if i < levels - 1:
            with net.group(f"up_blocks.{i}.upsamplers.0"):
                x = net.b.op("resize", [x], name="nearest", scale=2)
                x = net.conv(x, width, 3, padding=1, bias=True, name="conv")

    x = net.act(net.groupnorm(x, groups, "conv_norm_out"), "silu", "conv_act")
    out = net.conv(x, int(cfg["latent_channels"]), 3, padding=1, bias=True, name="conv_out")
    if net.train:
        target = net.input("noise_target", out.shape)
        net.b.op("mse_loss", [out, target], name="loss")
    return net.build(model=name, batch=batch, image_size=seq, latent_size=latent)


_cfg = load_data(_DATA)["sd15_unet"]
register_model(ModelEntry(
    name="sd15-unet", family="diffusion", description=_cfg["description"], source=_cfg["source"],
    builder=build_sd_unet,
    defaults={"batch": 1, "seq": int(_cfg["image_size"]), "dtype": str(_cfg["dtype"]), "phase": "forward"},
    phases=("forward", "train"),
    aliases=("sd-unet", "stable-diffusion-1.5-unet", "sd1.5-unet"),
))

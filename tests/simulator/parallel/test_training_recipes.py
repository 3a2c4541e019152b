"""Training recipes stated by flags: MaxText's custom remat policy (per-tensor device / offload / remat) and
the fp8 / int8 linear recipes (TE current scaling, MXFP8 block scaling, MaxText AQT int8)."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.parallel.compose import _stash_info, evaluate_plan
from workloads.parallel import ParallelPlan, PlanError, plan_graphs
from workloads.zoo.transformer import zoo_config


def _per_layer(policy: str, model: str = "llama-3-8b", seq: int = 512) -> tuple[float, float]:
    """(stash, offloaded) bytes one more layer adds, over s b h (b = 1)."""
    cfg = zoo_config(model)
    out = []
    for n in (3, 4):
        sg = plan_graphs(dataclasses.replace(cfg, layers=n), ParallelPlan(), train=True, seq=seq,
                         recompute=policy)[0]
        b, _, off = _stash_info(sg)
        out.append((b, off))
    return tuple((out[1][i] - out[0][i]) / (seq * cfg.d_model) for i in range(2))  # type: ignore[return-value]


# Llama 3 8B, h 4096, GQA q 4096 + k 1024 + v 1024, MLP 14336 (gate and up 7 sbh each at 2 bytes): the layer
# input 2 sbh is always kept; q 2, k 0.5, v 0.5; out_proj 2; context (attention output) 2; mlpwo 2
@pytest.mark.parametrize("policy, stash, offloaded", [
    ("custom", 2.0, 0.0),  # every name at its default: remat, decoder_layer_input on the device = full
    ("custom:decoder_layer_input=offload", 2.0, 2.0),
    ("custom:query_proj=device,key_proj=device,value_proj=device", 5.0, 0.0),  # = save_qkv_proj
    ("custom:query_proj=offload,key_proj=device", 4.5, 2.0),  # the fused q/k/v matmul split: q off, k kept
    ("custom:mlpwi_0=device", 9.0, 0.0),  # the gate half of the fused gate/up matmul
    ("custom:context=offload,mlpwo=offload", 6.0, 4.0),  # train-131's policy
    ("custom:query_proj=device,key_proj=device,value_proj=device,out_proj=device,mlpwi_0=device,mlpwi_1=device,"
     "mlpwo=device", 23.0, 0.0),  # = minimal: 2 + 3 + 2 + 14 + 2
])
def test_custom_policy_keeps_offloads_and_recomputes_per_tensor(policy: str, stash: float, offloaded: float) -> None:
    assert _per_layer(policy) == pytest.approx((stash, offloaded))


def test_custom_policy_recomputes_less_than_full() -> None:
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)

    def recomputed(policy: str) -> int:
        g = plan_graphs(cfg, ParallelPlan(), train=True, seq=256, recompute=policy)[0].graph
        return sum(op.flops for op in g.ops if "@recompute" in op.name)

    full, minimal = recomputed("full"), recomputed("minimal")
    device = recomputed("custom:query_proj=device,key_proj=device,value_proj=device,out_proj=device,"
                        "mlpwi_0=device,mlpwi_1=device,mlpwo=device")
    assert recomputed("custom") == full and device == minimal < full


def test_a_policy_offload_is_priced_over_the_host_link_and_refused_without_one() -> None:
    from simulator.hardware import load_hardware

    plan = ParallelPlan(dp=8, fsdp=True, microbatch=3, global_batch=24)
    hw = load_hardware("tpu-v6e-8")
    off = evaluate_plan("llama-3-8b", hw, plan, train=True, seq=8192, recompute="custom:decoder_layer_input=offload,"
                        "out_proj=offload,query_proj=offload,key_proj=offload,value_proj=offload")
    st = off.stages[0]
    a = st.memory_breakdown()["host.activations_per_microbatch"] / 32e9  # PCIe 5.0 of a v6e host, per direction
    # decoder_layer_input 2 + q 2 + k 0.5 + v 0.5 + out_proj 2 sbh per layer, 3 x 8192 tokens, 32 layers
    assert st.memory_breakdown()["host.activations_per_microbatch"] == pytest.approx(7 * 3 * 8192 * 4096 * 32)
    expected = max(0.0, a - st.forward_s) + max(0.0, a - st.backward_s)
    assert off.breakdown["offload_exposed_s"] == pytest.approx(expected)
    with pytest.raises(PlanError, match="no host link"):
        evaluate_plan("gpt2", load_hardware("jetson-agx-orin-64gb"), ParallelPlan(microbatch=1), train=True,
                      recompute="custom:decoder_layer_input=offload")


@pytest.mark.parametrize("policy, parts", [
    ("custom:query_prj=offload", ("unknown tensor name", "'query_prj'", "did you mean 'query_proj'")),
    ("custom:query_proj=ofload", ("unknown choice", "'ofload'", "did you mean 'offload'")),
    ("custom:decoder_layer_input=remat", ("decoder_layer_input", "device or offload")),
    ("custom:mla_q=device", ("mla_q", "expected remat")),
    ("custom:out_proj=device,out_proj=offload", ("given twice",)),
    ("custom:out_proj", ("NAME=CHOICE",)),
])
def test_bad_custom_policies_are_located(policy: str, parts: tuple[str, ...]) -> None:
    from workloads.recompute import check_policy

    with pytest.raises(ValueError) as exc:
        check_policy(policy)
    assert all(p in str(exc.value) for p in parts), str(exc.value)


def _ops(recipe: str) -> tuple[list, list, list]:
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    g = plan_graphs(cfg, ParallelPlan(), train=True, seq=256, fp8_linears=recipe)[0].graph
    gemms = [op for op in g.ops if op.attrs.get("compute_dtype")]
    casts = [op for op in g.ops if op.name.rsplit(".", 1)[-1].startswith("cast_")]
    amax = [op for op in g.ops if op.name.rsplit(".", 1)[-1].startswith("amax_")]
    return gemms, casts, amax


def test_each_recipe_launches_its_casts_and_reductions() -> None:
    # 4 linear layers x 2 layers x 3 GEMMs = 24 quantised GEMMs, 2 operands each. Transformer Engine casts
    # an activation once: per linear the input (forward, reused by the weight gradient), the output gradient
    # (both backward GEMMs) and the weight for the forward and the input gradient: 4 casts, 32 in all
    gemms, casts, amax = _ops("current")  # TE current scaling: amax over the whole tensor, then the cast
    assert len(gemms) == 24 and len(casts) == len(amax) == 32
    assert all(op.outputs[0].shape == (1,) for op in amax)
    gemms, casts, amax = _ops("mxfp8")  # block amax inside the quantising kernel: no separate reduction
    assert len(gemms) == 24 and len(casts) == 32 and not amax
    assert {op.attrs["compute_dtype"] for op in gemms} == {"fp8_e4m3"}
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    g = plan_graphs(cfg, ParallelPlan(), train=True, seq=256, fp8_linears="mxfp8")[0].graph
    assert sum(".columnwise_" in op.name for op in g.ops) == 16  # inputs and output gradients: 2 x 4 x 2
    gemms, casts, amax = _ops("int8")  # AQT: per-channel amax, int8 operands, a cast per GEMM operand
    assert len(gemms) == 24 and len(casts) == len(amax) == 48
    assert {op.attrs["compute_dtype"] for op in gemms} == {"int8"}
    assert {op.outputs[0].dtype.value for op in casts} == {"int8"}
    assert all(op.outputs[0].shape[-1] == 1 and len(op.outputs[0].shape) > 1 for op in amax)


@pytest.mark.parametrize("recipe", ["current", "mxfp8", "tensorwise", "rowwise", "int8"])
def test_fp8_graphs_count_every_forward_op(recipe: str) -> None:
    # meta['forward_ops'] is the forward pass's length: every op before the first backward op (the loss's
    # gradient), the casts, amaxes, MXFP8 columnwise copies and views inserted before forward GEMMs included
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    sg = plan_graphs(cfg, ParallelPlan(), train=True, seq=256, fp8_linears=recipe)[0]
    plain = plan_graphs(cfg, ParallelPlan(), train=True, seq=256)[0]
    first_bwd = plain.graph.ops[plain.forward_ops].name
    assert sg.graph.ops[sg.forward_ops].name == first_bwd
    assert sg.forward_ops > plain.forward_ops


def test_te_recipes_stash_the_quantised_linear_inputs() -> None:
    """Llama-3-8B layer, s b h bytes: 43.5 in 16 bits; TE keeps the fp8 input of the q/k/v, gate/up and down
    projections instead of the 16-bit one (2 -> 1, 2 -> 1, 7 -> 3.5) and the fp8 input of the output
    projection besides the attention output its kernel's backward reads (+1): 39 per layer."""
    assert _fp8_stash("current") == pytest.approx(39.0)
    # torchao saves the 16-bit activations and the fp8 weight (matmul_with_hp_or_float8_args saves the Float8Tensor
    # weight_hp_t): 43.5 + (4096 x 6144 + 4096 x 4096 + 4096 x 28672 + 14336 x 4096) bytes / (512 x 4096) = 43.5 + 104
    assert _fp8_stash("tensorwise") == pytest.approx(147.5)


def _fp8_stash(recipe: str) -> float:
    cfg = zoo_config("llama-3-8b")
    out = []
    for n in (1, 2):
        sg = plan_graphs(dataclasses.replace(cfg, layers=n), ParallelPlan(), train=True, seq=512, fp8_linears=recipe)[0]
        out.append(_stash_info(sg)[0])
    return (out[1] - out[0]) / (512 * cfg.d_model)


def test_mxfp8_is_refused_off_blackwell_and_te_recipes_cache_fp8_weights() -> None:
    from simulator.hardware import load_hardware

    plan = ParallelPlan(dp=8, microbatch=1, global_batch=8)
    with pytest.raises(PlanError, match="arch 'hopper'.*blackwell"):
        evaluate_plan("llama-3-8b", load_hardware("dgx-h100"), plan, train=True, seq=1024, fp8_linears="mxfp8")
    b200 = load_hardware("dgx-b200")
    linear = 32 * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096)
    for recipe in ("current", "mxfp8"):
        res = evaluate_plan("llama-3-8b", b200, plan, train=True, seq=1024, recompute="full", fp8_linears=recipe)
        assert res.to_json()["memory_breakdown"]["buffers.fp8_weight_cache"] == 2 * linear
    tw = evaluate_plan("llama-3-8b", b200, plan, train=True, seq=1024, recompute="full", fp8_linears="tensorwise")
    assert tw.to_json()["memory_breakdown"]["buffers.fp8_weight_cache"] == 0.0


def test_int8_runs_the_gemms_at_the_int8_rate_on_a_tpu() -> None:
    """TPU v6e: 1836 int8 TOP/s against 918 bf16 TFLOP/s (Google's v6e page): a large GEMM takes half the time."""
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware

    hw = load_hardware("tpu-v6e")
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=1)
    times = {}
    for recipe in (None, "int8"):
        g = plan_graphs(cfg, ParallelPlan(), train=True, seq=4096, fp8_linears=recipe)[0].graph
        rec = {r.name: r for r in evaluate(g, hw).records}
        times[recipe] = rec["layers.0.mlp.down"].time_s
    assert times[None] and times["int8"] == pytest.approx(times[None] / 2, rel=0.02)

"""Software-stack profiles: the eager Hugging Face graph (decomposed attention, gelu_new kernels, RMSNorm,
dropout, full logits), the profile registry, and its errors."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from workloads.frameworks import (
    ACTIVATION_KERNELS,
    PROFILES,
    FrameworkError,
    drop_optimizer,
    get_profile,
)
from workloads.resolve import load_workload
from workloads.serialize import graph_to_json

B, S, H, D = 2, 128, 12, 64  # GPT-2 small: 12 heads of 64


def _layer0(g, group):
    return [op for op in g if op.group.startswith(f"layers.0.{group}")]


def test_eager_gpt2_attention_is_decomposed_over_full_scores():
    g = load_workload("gpt2", batch=B, seq=S, phase="prefill", dtype="fp16", framework="eager")
    assert not [op for op in g if op.kind == "attention"]
    core = {op.name.rsplit(".", 1)[-1]: op for op in _layer0(g, "attn.core")}
    assert set(core) >= {"qk", "scale", "mask", "softmax", "pv"}
    scores = B * H * S * S
    # QK^T over the full s x s scores (no causal skipping): 2 * b * h * s * s * d FLOPs
    assert core["qk"].outputs[0].shape == (B, H, S, S)
    assert core["qk"].flops == 2 * B * H * S * S * D == 50_331_648
    # the causal mask is applied (torch.where over the scores): reads and writes every fp16 score
    assert core["mask"].bytes_read + core["mask"].bytes_written == 2 * scores * 2 == 1_572_864
    assert core["softmax"].inputs[0].numel == scores == 393_216
    assert core["pv"].flops == 2 * B * H * S * S * D
    # the head merge is a real copy (permute + contiguous in GPT2Attention._merge_heads)
    assert [op.kind for op in _layer0(g, "attn") if op.name.endswith("heads_contiguous")] == ["transpose"]


def test_gelu_new_is_eight_kernels():
    g = load_workload("gpt2", batch=1, seq=64, phase="prefill", framework="eager")
    act = [op for op in _layer0(g, "mlp.act")]
    assert len(act) == len(ACTIVATION_KERNELS["gelu_new"]) == 8
    assert [op.attrs["op"] for op in act] == ["scale", "pow", "scale", "add", "scale", "tanh", "add", "mul"]
    default = load_workload("gpt2", batch=1, seq=64, phase="prefill")
    assert [op.attrs["op"] for op in _layer0(default, "mlp") if op.kind == "elementwise"] == ["gelu"]


def test_eager_logits_for_every_position_and_profile_in_json():
    g = load_workload("gpt2", batch=1, seq=64, phase="prefill", framework="eager")
    logits = next(op for op in g if op.name == "lm_head.logits")
    assert logits.outputs[0].shape == (1, 64, 50257)
    d = load_workload("gpt2", batch=1, seq=64, phase="prefill")
    assert next(op for op in d if op.name == "lm_head.logits").outputs[0].shape == (1, 1, 50257)
    js = graph_to_json(g)
    assert js["meta"]["framework"] == "eager" and js["meta"]["attention"] == "decomposed"
    assert "framework" not in graph_to_json(d)["meta"]


def test_dropout_kernels_only_in_training():
    train = load_workload("gpt2", batch=1, seq=64, train=True, framework="eager")
    # embedding dropout + per layer: attention probabilities, attention output, MLP output (GPT-2 p = 0.1)
    drops = [op for op in train if op.kind == "elementwise" and op.attrs.get("op") == "dropout"]
    assert len(drops) == 1 + 3 * 12
    infer = load_workload("gpt2", batch=1, seq=64, phase="prefill", framework="eager")
    assert not [op for op in infer if op.attrs.get("op") == "dropout"]
    # Llama's attention_dropout is 0.0: no dropout kernel at all
    llama = load_workload("llama-2-7b", batch=1, seq=32, train=True, framework="eager")
    assert not [op for op in llama if op.attrs.get("op") == "dropout"]


def test_llama_eager_rmsnorm_and_rope_kernels():
    g = load_workload("llama-2-7b", batch=1, seq=32, phase="prefill", dtype="bf16", framework="eager")
    norm = [op.kind + ":" + str(op.attrs.get("op", "")) for op in _layer0(g, "attn_norm")]
    assert norm == ["elementwise:cast", "elementwise:pow", "reduction:mean", "elementwise:add", "elementwise:rsqrt",
                    "elementwise:mul", "elementwise:cast", "elementwise:mul"]
    rope = [op for op in _layer0(g, "attn.rope_q") if op.kind not in ("split",)]
    assert [op.kind for op in rope] == ["elementwise", "concat", "elementwise", "elementwise", "elementwise"]
    # softmax in float32, then cast back (eager_attention_forward)
    sm = next(op for op in _layer0(g, "attn.core") if op.kind == "softmax")
    assert sm.outputs[0].dtype.value == "fp32"


def test_default_graph_unchanged_by_registry():
    a = load_workload("llama-2-7b", batch=1, seq=64, phase="prefill")
    b = load_workload("llama-2-7b", batch=1, seq=64, phase="prefill", framework="vllm")
    # a profile without graph changes emits the same ops (only meta records it)
    assert [(op.name, op.kind) for op in a] == [(op.name, op.kind) for op in b]
    assert b.meta["framework"] == "vllm" and "framework" not in a.meta


def test_drop_optimizer():
    g = load_workload("gpt2", batch=1, seq=32, train=True)
    n_opt = sum(op.kind == "optimizer_update" for op in g)
    assert n_opt > 0
    h = drop_optimizer(g)
    assert sum(op.kind == "optimizer_update" for op in h) == 0 and len(h) == len(g) - n_opt
    assert h.meta["optimizer"] == "none"


def test_profiles_and_aliases():
    assert set(PROFILES) == {"eager", "sdpa", "compile", "cuda-graphs", "tensorrt", "trt-llm", "trt-llm-pytorch", "vllm",
                             "vllm-v0", "sglang", "sglang-0.3",
                             "xla", "fsdp2", "torchtitan-eager", "fsdp2-compile", "automodel", "automodel-compile", "fsdp2-compile-blocks", "megatron-core", "megatron-lm", "maxtext",
                             "maxtext-cf", "maxtext-serial", "maxtext-sc", "maxtext-cf-sc"}
    assert get_profile("torch.compile").name == "compile"
    assert get_profile("eager").cost_options() == {"fusion": False, "epilogue_fusion": True, "norm_fusion": False,
                                                   "cuda_graphs": False, "eager_framework": True, "eager_modules": True,
                                                   "attention_kernel": "auto", "conv_layout": "nchw",
                                                   "all_reduce_kernel": "nccl", "fp8_activation_scale": "dynamic",
                                                   "fp8_accumulation": "fast", "tpu_segment_ids": False}
    assert get_profile("vllm").cost_options()["cuda_graphs"] is True
    # vLLM's custom all-reduce: vLLM (V0 and V1) and SGLang run it by default; TensorRT-LLM stays NCCL (no table)
    assert {n for n, p in PROFILES.items() if p.all_reduce_kernel == "vllm-custom"} == {"vllm", "sglang"}
    # the 2024 builds (vLLM 0.6.0, SGLang 0.3.0 with vllm 0.5.5) ran the kernel before vLLM PR #8558
    assert {n for n, p in PROFILES.items() if p.all_reduce_kernel == "vllm-custom-2024"} == {"vllm-v0", "sglang-0.3"}
    # Inductor, vLLM and SGLang call cuBLAS / cuDNN as library kernels: nothing fuses into a contraction
    unfused = ("compile", "fsdp2-compile", "fsdp2-compile-blocks", "automodel-compile", "vllm", "vllm-v0", "sglang", "sglang-0.3")
    for name in unfused:
        assert get_profile(name).cost_options()["epilogue_fusion"] is False, name
    assert all(p.epilogue_fusion for p in PROFILES.values() if p.name not in unfused)
    with pytest.raises(FrameworkError, match=r"got 'eagr'.*did you mean 'eager'\?"):
        get_profile("eagr")
    for p in PROFILES.values():
        assert p.sources, p.name


def test_cli_unknown_framework_exit_2(capsys):
    rc = main(["predict", "gpt2", "--hardware", "a100-sxm4-80gb", "--framework", "vlm"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "--framework: unknown framework; got 'vlm'" in err and "did you mean 'vllm'?" in err


def test_cli_attention_on_cnn_exit_2(capsys):
    rc = main(["predict", "resnet50", "--hardware", "a100-sxm4-80gb", "--attention", "decomposed"])
    assert rc == 2 and "not a transformer" in capsys.readouterr().err


def test_cli_framework_sets_costing(capsys):
    rc = main(["predict", "gpt2", "--hardware", "a100-sxm4-80gb", "--seq", "64", "--framework", "eager", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    opts = out["provenance"]["options"]
    assert opts["eager_framework"] is True and opts["fusion"] is False
    assert out["provenance"]["workload"]["framework"] == "eager"
    # every kernel pays at least the framework's per-op host time (20 us on the catalog's GPUs)
    assert out["totals"]["latency_s"] >= out["totals"]["kernels"] * 20e-6 * (1 - 1e-9)


def test_separate_projections_follow_the_model_code():
    bert = load_workload("bert_base", batch=1, seq=64, framework="eager")
    names = {op.name.rsplit(".", 1)[-1] for op in _layer0(bert, "attn") if op.kind == "matmul"}
    assert {"q", "k", "v"} <= names and "qkv" not in names  # BertSelfAttention: three nn.Linear
    gpt2 = load_workload("gpt2", batch=1, seq=64, phase="prefill", framework="eager")
    assert "qkv" in {op.name.rsplit(".", 1)[-1] for op in _layer0(gpt2, "attn") if op.kind == "matmul"}  # c_attn
    llama = load_workload("llama-2-7b", batch=1, seq=16, phase="prefill", framework="eager")
    mlp = {op.name.rsplit(".", 1)[-1] for op in _layer0(llama, "mlp") if op.kind == "matmul"}
    assert mlp == {"gate", "up", "down"}
    # the same FLOPs as the fused projections
    fused = load_workload("llama-2-7b", batch=1, seq=16, phase="prefill")
    f = sum(op.flops for op in _layer0(fused, "mlp") if op.kind == "matmul")
    assert sum(op.flops for op in _layer0(llama, "mlp") if op.kind == "matmul") == f


def test_hf_config_follows_its_model_type():
    from workloads.hf import build_from_config

    cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 2, "n_head": 12, "n_positions": 1024,
           "vocab_size": 50257, "activation_function": "gelu_new"}
    g = build_from_config(cfg, seq=64, framework="eager")
    assert len(_layer0(g, "mlp.act")) == 8  # gelu_new as modeling_gpt2 runs it
    assert "qkv" in {op.name.rsplit(".", 1)[-1] for op in _layer0(g, "attn") if op.kind == "matmul"}
    assert g.meta["framework"] == "eager"
    assert "framework" not in build_from_config(cfg, seq=64).meta


# --- the devices a profile runs on ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kind", "vendor", "ok"), [
    ("tensorrt", "gpu", "NVIDIA", True), ("tensorrt", "tpu", "NVIDIA", True),  # Jetson's DLA
    ("tensorrt", "tpu", "Google", False), ("tensorrt", "gpu", "AMD", False), ("trt-llm", "tpu", "NVIDIA", False),
    ("vllm", "tpu", "Google", True), ("vllm", "cpu", "Intel", False), ("sglang", "gpu", "AMD", True),
    ("eager", "cpu", "Intel", True), ("eager", "tpu", "Google", False), ("cuda-graphs", "gpu", "AMD", True),
    ("cuda-graphs", "cpu", "Intel", False), ("xla", "tpu", "Google", True), ("xla", "cpu", "Arm (in NVIDIA Orin)", True),
])
def test_profile_applies_to_its_devices(name, kind, vendor, ok):
    from workloads.frameworks import PROFILES

    assert PROFILES[name].applies_to(kind, vendor) is ok


def test_profile_on_a_device_it_does_not_run_on_is_refused_with_the_valid_ones():
    from workloads.frameworks import PROFILES, FrameworkError, check_profile_device, profiles_for

    assert profiles_for("tpu", "Google") == ["maxtext", "maxtext-cf", "maxtext-cf-sc", "maxtext-sc", "maxtext-serial", "vllm", "xla"]
    with pytest.raises(FrameworkError, match=r"^--framework tensorrt: does not run on tpu-v4 \(Google tpu\); got "
                                             r"'tensorrt', which runs on NVIDIA gpu, NVIDIA DLA \(Jetson\); expected one of maxtext, "
                                             r"maxtext-cf, maxtext-cf-sc, maxtext-sc, maxtext-serial, vllm, xla for this device, or no --framework$"):
        check_profile_device(PROFILES["tensorrt"], "tpu-v4", "tpu", "Google")


@pytest.mark.parametrize(("argv", "line"), [
    (["--hardware", "tpu-v4", "--framework", "tensorrt"], "--framework tensorrt: does not run on tpu-v4"),
    (["--hardware", "h100-sxm5-80gb", "--framework", ""], "--framework: empty framework name; got ''"),
    (["--hardware", "xeon-platinum-8480", "--framework", "vllm"], "expected one of compile, eager, sdpa, xla"),
])
def test_cli_refuses_a_profile_for_the_wrong_device(capsys, argv, line):
    from simulator.cli import main

    assert main(["predict", "gemm:m=64,n=64,k=64", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err, err


def test_vllm_v0_runs_flash_attention_2_on_hopper():
    """vLLM 0.5 / 0.6 ran FlashAttention-2 on an H100 (FA3 came with pull request #12093, v0.7.0): the profile
    prices its prefill attention as flash2, the same op slower than the FA3-class kernel `auto` picks there."""
    from simulator.engines.analytical import EvalOptions, evaluate, spec_of
    from simulator.hardware import load_hardware
    from simulator.lowering.gpu import attention_kernel_for
    from workloads.ir import GraphBuilder

    dev = spec_of(load_hardware("h100-sxm5-80gb"))[0]
    assert attention_kernel_for(dev, get_profile("vllm-v0").attention_kernel) == "flash2"
    assert attention_kernel_for(dev, get_profile("vllm").attention_kernel) == "flash3"
    b = GraphBuilder("a", dtype="bf16")
    q, k, v = (b.input(n, (1, 64, 2048, 128)) for n in "qkv")
    b.op("attention", [q, k, v], name="core", causal=True)
    g = b.build({})
    t = {name: evaluate(g, dev, EvalOptions(**get_profile(name).cost_options())).totals.latency_s
         for name in ("vllm-v0", "vllm")}
    assert t["vllm-v0"] > 1.3 * t["vllm"]


def test_megatron_lm_profile_builds_the_2022_core_attention_and_dropout() -> None:
    """Megatron-LM @ d63c2541 CoreAttention: baddbmm (scale as alpha), FusedScaleMaskSoftmax (mask and scale in
    the softmax kernel), attention dropout, bmm; dropout 0.1 on every dropout layer in training only."""
    from workloads.zoo.transformer import TransformerConfig, build

    cfg = TransformerConfig(name="t", layers=1, d_model=256, heads=4, d_ff=1024, vocab=512, max_positions=256)
    g = build(cfg, batch=2, seq=128, phase="train", framework="megatron-lm")
    core = [op.name.rsplit(".", 1)[-1] for op in g.ops if ".attn.core." in op.name and op.kind != "reshape"]
    assert core == ["qk", "softmax", "attn_dropout", "pv"]
    drop = [op for op in g.ops if op.name.endswith("dropout")]
    assert len(drop) == 4  # embedding, attention probabilities, after the attention output, after the MLP
    probs = next(op for op in drop if op.name.endswith("attn_dropout"))
    assert probs.outputs[0].shape == (2, 4, 128, 128)
    inf = build(cfg, batch=2, seq=128, phase="prefill", framework="megatron-lm")
    assert not any(op.name.endswith("dropout") for op in inf.ops)
    assert [op.name.rsplit(".", 1)[-1] for op in inf.ops if ".attn.core." in op.name and op.kind != "reshape"] == \
        ["qk", "softmax", "pv"]


def test_megatron_lm_optimizer_update_carries_the_mixed_precision_passes() -> None:
    """Per 16-bit parameter: AdamW with an fp32 master copy reads 2 + 2 + 12 and writes 2 + 12 bytes; Megatron-LM's
    passes beside it add the l2norm (4 read) and the main-to-model cast (4 + 2), and with fp16 the gradient's cast
    into fp32 (2 + 4) and the unscale (4 + 4); zero_grad_buffer writes the main-gradient buffer once per iteration
    (bf16: fp32, 4; fp16: fp16, 2)."""
    from workloads.frameworks import megatron_optimizer_passes
    from workloads.training import training_graph
    from workloads.zoo.transformer import TransformerConfig, build

    cfg = TransformerConfig(name="t", layers=1, d_model=256, heads=4, d_ff=1024, vocab=512, max_positions=256)
    for dtype, (r, w) in {"bf16": (16 + 8, 14 + 2 + 4), "fp16": (16 + 14, 14 + 10 + 2)}.items():
        g = megatron_optimizer_passes(training_graph(build(cfg, batch=2, seq=128, phase="train", dtype=dtype)))
        up = next(op for op in g if op.name == "optimizer.layers.0.attn.qkv.weight")
        n = up.inputs[0].numel
        assert (up.bytes_read, up.bytes_written) == (r * n, w * n)
    fp32 = training_graph(build(cfg, batch=2, seq=128, phase="train", dtype="fp32"))
    assert megatron_optimizer_passes(fp32) is fp32


def test_a_node_needs_one_device_that_runs_the_profile():
    # Jetson AGX Orin: GPU + two DLAs + Arm CPU. TensorRT runs on the GPU and the DLAs (not the CPU) and eager
    # PyTorch on the GPU and the CPU (not the DLAs): each is accepted for the node; MaxText runs on none of them
    from hwmodels.node import load_node
    from workloads.frameworks import PROFILES, FrameworkError, check_profile_hardware

    node = load_node("jetson-agx-orin-64gb")
    for name in ("tensorrt", "eager", "xla"):
        check_profile_hardware(PROFILES[name], node)
    with pytest.raises(FrameworkError, match=r"^--framework maxtext: runs on no device of jetson-agx-orin-64gb "
                                             r"\(jetson-agx-orin-64gb \(NVIDIA gpu\), orin-dla \(NVIDIA DLA \(Jetson\)\), "
                                             r"cortex-a78ae-12c \(Arm \(in NVIDIA Orin\) cpu\)\); got 'maxtext', .*; expected one of automodel, automodel-compile, compile, .*tensorrt.*, or no --framework$"):
        check_profile_hardware(PROFILES["maxtext"], node)


def test_a_dla_is_named_and_refuses_xla():
    from hwmodels.catalog import load_device
    from workloads.frameworks import PROFILES, FrameworkError, check_profile_hardware

    with pytest.raises(FrameworkError, match=r"^--framework xla: does not run on orin-dla \(NVIDIA DLA \(Jetson\)\); "
                                             r".*expected one of tensorrt for this device, or no --framework$"):
        check_profile_hardware(PROFILES["xla"], load_device("orin-dla"))
    check_profile_hardware(PROFILES["xla"], load_device("systolic-128x128-bf16"))  # a design point lowers as a TPU

"""Training-stack profiles (fsdp2, megatron-core, maxtext): their devices, costing and stack, and the
one-line refusal of a profile on a device it does not run on."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from workloads.frameworks import (
    PROFILES,
    FrameworkError,
    check_profile_device,
    get_profile,
    profiles_for,
)


@pytest.mark.parametrize(("name", "kind", "vendor", "ok"), [
    ("fsdp2", "gpu", "NVIDIA", True), ("fsdp2", "gpu", "AMD", True), ("fsdp2", "tpu", "Google", False),
    ("fsdp2", "cpu", "Intel", False), ("megatron-core", "gpu", "NVIDIA", True), ("megatron-core", "gpu", "AMD", False),
    ("megatron-core", "tpu", "Google", False), ("maxtext", "tpu", "Google", True), ("maxtext", "gpu", "NVIDIA", False),
    ("maxtext", "tpu", "NVIDIA", False),  # Jetson's DLA is kind tpu in this catalog: MaxText does not run there
])
def test_training_profiles_name_their_devices(name, kind, vendor, ok):
    assert PROFILES[name].applies_to(kind, vendor) is ok


def test_training_profiles_stack_costing_and_sources():
    f, m, x = get_profile("fsdp2"), get_profile("megatron-core"), get_profile("maxtext")
    # FSDP2 (torchtitan): eager modules, SDPA's FlashAttention-2 kernel, float32 gradient reduce
    assert (f.stack, f.grad_reduce_dtype, f.attention_kernel, f.fusion, f.eager_dispatch) == \
        ("fsdp2", "fp32", "flash2", False, True)
    assert (m.stack, m.fusion, m.attention_kernel) == ("megatron-core", True, "auto")
    assert (x.stack, x.fusion) == ("xla-spmd", True)
    assert not x.changes_graph  # costing and plan-level only: a parallel plan accepts it
    # Megatron-Core: TE's fused RoPE per tensor and the QKV split's copies, a graph change its stack builds
    assert m.changes_graph and (m.fused_rope, m.split_qkv_copies, m.unfused_rope_families) == (True, True, ("gpt-oss",))
    # fsdp2 is torchtitan's model code (complex RoPE, repeat_kv): a graph change a parallel plan builds (its stack)
    assert f.changes_graph and (f.complex_rope, f.repeat_kv) == (True, True)
    for p in (f, m, x):
        assert p.sources and all(len(s) > 40 for s in p.sources)
    assert get_profile("torchtitan") is f and get_profile("mcore") is m
    assert profiles_for("tpu", "Google") == ["maxtext", "maxtext-cf", "maxtext-cf-sc", "maxtext-sc", "maxtext-serial", "vllm", "xla"]
    assert f.describe()["stack"] == "fsdp2" and get_profile("eager").describe()["stack"] == "generic"


def test_maxtext_on_a_gpu_is_refused_with_the_profiles_that_run_there():
    with pytest.raises(FrameworkError, match=r"^--framework maxtext: does not run on h100-sxm5-80gb \(NVIDIA gpu\); "
                                             r"got 'maxtext', which runs on Google tpu; expected one of .*fsdp2, fsdp2-compile, fsdp2-compile-blocks, "
                                             r"megatron-core, megatron-lm, sdpa.* for this device, or no --framework$"):
        check_profile_device(PROFILES["maxtext"], "h100-sxm5-80gb", "gpu", "NVIDIA")


@pytest.mark.parametrize(("argv", "line"), [
    (["--hardware", "h100-sxm5-80gb", "--framework", "maxtext"], "--framework maxtext: does not run on h100-sxm5-80gb"),
    (["--hardware", "tpu-v5e", "--framework", "fsdp2"], "--framework fsdp2: does not run on tpu-v5e"),
    (["--hardware", "mi300x", "--framework", "megatron-core"], "--framework megatron-core: does not run on mi300x"),
    (["--hardware", "dgx-h100", "--framework", "maxtext", "--train", "--dp", "8", "--fsdp"],
     "--framework maxtext: does not run on dgx-h100 (NVIDIA gpu)"),
])
def test_cli_refuses_a_training_profile_on_the_wrong_device(capsys, argv, line):
    assert main(["predict", "gpt2", "--seq", "128", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err, err


def test_cli_fsdp2_costs_attention_with_flashattention2(capsys):
    """The profile's costing reaches the engine: FA2 (warp-level mma.sync) attention on an H100 is slower
    than the FA3-class kernel the engine picks on Hopper without a profile (a training step: ``fsdp2`` is a
    training stack, refused for one device's inference step)."""
    argv = ["predict", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--seq", "4096", "--batch", "1", "--json",
            "--train"]
    assert main([*argv, "--framework", "fsdp2"]) == 0
    fsdp2 = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    auto = json.loads(capsys.readouterr().out)
    t2 = fsdp2["breakdown_by_kind"]["attention"]
    t3 = auto["breakdown_by_kind"]["attention"]
    t2, t3 = (t["time_s"] if isinstance(t, dict) else t for t in (t2, t3))
    assert t2 > 1.5 * t3

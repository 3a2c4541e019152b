"""Measurement harness: backward kernels are timed, GPU names map to catalog devices, CUDA fp32 precision per case."""

from __future__ import annotations

import pytest

from simulator.calibration.harness import Case, TimingPolicy, catalog_gpu_name, run_cases

CATALOG = ["a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "b200", "h100-pcie-80gb",
           "h100-sxm5-80gb", "h200-sxm-141gb", "l4", "l40s", "mi300x", "t4", "v100-pcie-32gb", "v100-sxm2-32gb", "host"]
GIB = 2**30


@pytest.mark.parametrize(("reported", "memory_gib", "expected"), [
    ("NVIDIA H100 80GB HBM3", 79.1, "h100-sxm5-80gb"),  # the SXM5 board does not say SXM
    ("NVIDIA H100 PCIe", 79.1, "h100-pcie-80gb"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-sxm4-40gb"),
    ("NVIDIA A100-SXM4-80GB", 79.2, "a100-sxm4-80gb"),
    ("NVIDIA A100 80GB PCIe", 79.2, "a100-pcie-80gb"),
    ("NVIDIA A100-PCIE-40GB", 39.4, "a100-pcie-40gb"),
    ("NVIDIA H200", 139.8, "h200-sxm-141gb"),
    ("Tesla V100-SXM2-32GB", 31.7, "v100-sxm2-32gb"),
    ("Tesla T4", 14.6, "t4"),
    ("NVIDIA L4", 22.0, "l4"),
    ("NVIDIA L40S", 44.4, "l40s"),  # not "l4"
    ("AMD Instinct MI300X", 191.5, "mi300x"),
])
def test_reported_gpu_names_map_to_the_catalog(reported: str, memory_gib: float, expected: str) -> None:
    assert catalog_gpu_name(reported, memory_gib * GIB, CATALOG) == expected


def test_unknown_or_ambiguous_gpu_names_ask_for_device_name() -> None:
    with pytest.raises(ValueError, match="'NVIDIA GeForce RTX 4090'.*not in the catalog.*--device-name"):
        catalog_gpu_name("NVIDIA GeForce RTX 4090", 24 * GIB, CATALOG)
    with pytest.raises(ValueError, match="could be h100-nvl-94gb or h100-pcie-94gb; expected --device-name"):
        catalog_gpu_name("NVIDIA H100 94GB", 88 * GIB, ["h100-pcie-94gb", "h100-nvl-94gb", "h200-sxm-141gb"])


def test_backward_kernels_and_training_steps_are_timed_not_skipped() -> None:
    """Autograd-based backward kernels cannot run in inference mode: they were all skipped before."""
    pytest.importorskip("torch")
    cases = [Case("attention:b=1,h=2,s=32,d=16,causal=1,bwd=1", "fp32", "attention"),
             Case("resnet18", "fp32", "e2e_cnn", batch=2, seq=32, train=True)]
    ms, skipped = run_cases(cases, policy=TimingPolicy(warmup_s=0.0, budget_s=0.0, min_reps=2, max_reps=2), threads=1)
    assert skipped == []
    assert [m.workload for m in ms] == ["attention:b=1,h=2,s=32,d=16,causal=1,bwd=1", "resnet18"]
    assert all(m.median_s > 0 and m.repetitions == 2 and m.device == "host" for m in ms)
    assert ms[1].train is True and ms[0].train is None


@pytest.mark.parametrize(("dtype", "expected"), [("fp32", "ieee"), ("bf16", "ieee"), ("tf32", "tf32")])
def test_cuda_fp32_precision_follows_the_case_dtype_and_is_restored(dtype: str, expected: str) -> None:
    """PyTorch runs fp32 cuDNN convolutions on TF32 by default; an fp32 case must time IEEE fp32."""
    torch = pytest.importorskip("torch")
    from simulator.calibration.harness import _execution_mode, _fp32_precision_flags

    flags, _ = _fp32_precision_flags(torch)
    before = [getattr(o, a) for o, a in flags]
    with _execution_mode(torch, "cuda", dtype, needs_autograd=False):
        assert {getattr(o, a) for o, a in flags} == ({expected} if isinstance(before[0], str)
                                                      else {expected == "tf32"})
        assert torch.is_inference_mode_enabled()
    assert [getattr(o, a) for o, a in flags] == before
    with _execution_mode(torch, "cpu", dtype, needs_autograd=True):
        assert not torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        assert [getattr(o, a) for o, a in flags] == before  # the CPU path leaves the CUDA switches alone


def test_low_precision_contractions_on_a_cpu_without_their_library_path_are_skipped_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from hwmodels import host
    from simulator.calibration.harness import portable_loop_reason

    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    real = host.read_host_info()
    avx2 = dataclasses.replace(real, flags=frozenset({"avx", "avx2", "fma", "f16c"}))
    monkeypatch.setattr(host, "read_host_info", lambda: avx2)
    bf16 = Case("gemm:m=64,n=64,k=64", "bf16", "gemm")
    reason = portable_loop_reason(bf16, "cpu", "torch")
    assert reason.startswith("ATen's portable GEMM loops") and "avx512bw" in reason
    assert portable_loop_reason(Case("gemm:m=64,n=64,k=64", "fp32", "gemm"), "cpu", "torch") == ""
    assert portable_loop_reason(Case("elementwise:numel=64,op=add", "bf16", "elementwise"), "cpu", "torch") == ""
    assert portable_loop_reason(bf16, "cuda", "torch") == ""
    pytest.importorskip("torch")
    ms, skipped = run_cases([bf16, Case("gemm:m=16,n=16,k=16", "fp32", "gemm")], backend="torch", threads=1,
                            policy=TimingPolicy(warmup_s=0.0, budget_s=0.0, min_reps=1, max_reps=1))
    assert [m.dtype for m in ms] == ["fp32"] and skipped == [(bf16, reason)]
    with_avx512 = dataclasses.replace(avx2, flags=avx2.flags | {"avx512bw", "avx512vl", "avx512dq"})
    monkeypatch.setattr(host, "read_host_info", lambda: with_avx512)
    assert portable_loop_reason(bf16, "cpu", "torch") == ""


def test_interleaved_rounds_pool_every_round_and_keep_the_case_order() -> None:
    """Google Benchmark's random interleaving: each round times every case for its share of the budget."""
    pytest.importorskip("torch")
    cases = [Case("gemm:m=16,n=16,k=16", "fp32", "gemm"), Case("elementwise:numel=256,op=add", "fp32", "elementwise"),
             Case("softmax:rows=4,cols=32", "fp32", "softmax")]
    seen: list[tuple[int, bool]] = []
    policy = TimingPolicy(warmup_s=0.0, budget_s=0.0, min_reps=6, max_reps=6, passes=3)
    ms, skipped = run_cases(cases, policy=policy, threads=1, progress=lambda i, n, c, m: seen.append((i, m is None)))
    assert skipped == [] and [m.workload for m in ms] == [c.workload for c in cases]
    assert [m.id for m in ms] == ["host-001", "host-002", "host-003"]
    assert all(m.repetitions == 6 for m in ms)  # 2 per round x 3 rounds
    assert all("3 interleaved rounds" in m.source for m in ms)
    assert sorted(i for i, _ in seen) == [0, 1, 2] and not any(none for _, none in seen)  # once per case
    r1 = policy.round(1)
    assert (r1.budget_s, r1.min_reps, r1.max_reps, r1.warmup_s, r1.warmup_runs) == (0.0, 2, 2, 0.0, 1)
    assert policy.round(0).warmup_runs == 2 and TimingPolicy().round(3) == TimingPolicy()


@pytest.mark.parametrize("passes", [0, -1, 1.5, True])
def test_timing_policy_refuses_a_bad_number_of_rounds(passes: object) -> None:
    with pytest.raises(ValueError, match="TimingPolicy: passes; got"):
        TimingPolicy(passes=passes)  # type: ignore[arg-type]

"""CPU lowering rules: hand-computed costs per kernel-library path, PyTorch's dispatch choices, host spec fields."""

from __future__ import annotations

import math

import pytest

from hwmodels.spec import (
    ClockSpec,
    ComputeSpec,
    CpuSpec,
    DeviceSpec,
    EfficiencySpec,
    EnergySpec,
    MemoryLevel,
    PowerSpec,
    SpecError,
)
from simulator.lowering.cpu import _flash_pairs, conv_path, cpu_kernel_cost
from workloads.resolve import load_workload

FP32 = 100e9  # FLOP/s
OVERHEAD = 2e-6
LIB = 10e-6


def cpu_device(units: int = 1, **cpu_over: float) -> DeviceSpec:
    cpu = dict(gemm_peak_fraction=0.5, dnn_peak_fraction=0.8, gemm_half_m=8.0, gemm_half_n=16.0, gemm_half_k=4.0,
               special_function_s={"exp": 1e-9, "tanh": 2e-9}, strided_copy_run_s=4e-9, library_call_overhead_s=LIB)
    cpu.update(cpu_over)
    return DeviceSpec(
        name="toy-cpu", kind="cpu", vendor="test", arch="toy", description="hand-made CPU for rule tests",
        clock=ClockSpec(3e9, 3e9),
        compute=ComputeSpec(units, {"fp32": FP32, "bf16": 2 * FP32}, {"fp32": FP32, "bf16": FP32}),
        memory=(MemoryLevel("dram", 64e9, 20e9, 20e9, 100e-9, 0.0), MemoryLevel("l3", 32 * 2**20, 100e9, 100e9, 10e-9, 0.0),
                MemoryLevel("l2", 2**20, 200e9, 200e9, 2e-9, 0.0)),
        power=PowerSpec(0.0, 0.0), energy=EnergySpec({}, {}),
        efficiency=EfficiencySpec(tensor_peak_fraction=1.0, vector_peak_fraction=0.25, dram_bandwidth_fraction=1.0,
                                  l2_bandwidth_fraction=1.0, bandwidth_half_size_bytes=1.0,
                                  launch_overhead_s=OVERHEAD, graph_launch_overhead_s=OVERHEAD),
        cpu=CpuSpec(**cpu),
    )


def only_op(workload: str, dtype: str = "fp32"):  # noqa: ANN201 - Op
    g = load_workload(workload, dtype=dtype)
    ops = [op for op in g if op.kind not in ("reshape", "split", "slice")]
    assert len(ops) == 1, [op.kind for op in ops]
    return ops[0]


def test_fp32_gemm_blas_path_hand_computed() -> None:
    op = only_op("gemm:m=64,n=32,k=128")
    kc = cpu_kernel_cost(op, cpu_device())
    eff = 0.5 * (64 / 72) * (32 / 48) * (128 / 132)
    assert kc.rule == "cpu-blas-gemm"
    assert kc.compute_s == pytest.approx(2 * 64 * 32 * 128 / (FP32 * eff), rel=1e-12)
    assert kc.latency_s == OVERHEAD


def test_bf16_gemm_goes_to_the_library_above_torch_threshold() -> None:
    small = cpu_kernel_cost(only_op("gemm:m=16,n=16,k=16", "bf16"), cpu_device())  # m*n*k = 4096: not above
    big = cpu_kernel_cost(only_op("gemm:m=32,n=32,k=32", "bf16"), cpu_device())
    assert small.rule == "cpu-blas-gemm" and small.latency_s == OVERHEAD
    assert big.rule == "cpu-dnn-gemm" and big.latency_s == pytest.approx(OVERHEAD + LIB)
    eff = 0.8 * (32 / 40) * (32 / 48) * (32 / 36)
    assert big.compute_s == pytest.approx(2 * 32**3 / (2 * FP32 * eff), rel=1e-12)


@pytest.mark.parametrize(("workload", "units", "path"), [
    ("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1", 1, "direct"),        # 200704 input elements > 20480
    ("conv2d:n=1,c=64,h=16,w=16,k=64,r=3,s=3,pad=1", 1, "im2col"),        # 16384 <= 20480, one image
    ("conv2d:n=4,c=32,h=32,w=32,k=32,r=3,s=3,pad=1", 1, "direct"),        # batch > 1
    ("conv2d:n=1,c=3,h=64,w=64,k=64,r=7,s=7,stride=2,pad=3", 1, "direct"),  # filter larger than 3x3
    ("conv2d:n=1,c=256,h=28,w=28,k=128,r=1,s=1", 1, "im2col"),            # 1x1, one thread: native
    ("conv2d:n=1,c=256,h=28,w=28,k=128,r=1,s=1", 2, "direct"),            # 1x1, more threads: oneDNN
])
def test_conv_dispatch_follows_torch_use_mkldnn(workload: str, units: int, path: str) -> None:
    assert conv_path(only_op(workload), cpu_device(units)) == path


def test_im2col_conv_hand_computed() -> None:
    op = only_op("conv2d:n=1,c=64,h=16,w=16,k=64,r=3,s=3,pad=1")
    kc = cpu_kernel_cost(op, cpu_device())
    runs = 64 * 9 * 16  # channels x filter taps x output rows
    eff = 0.5 * (64 / 72) * (256 / 272) * (576 / 580)  # m = K, n = P*Q, k = C*R*S
    assert kc.rule == "cpu-im2col-gemm"
    assert kc.compute_s == pytest.approx(op.flops / (FP32 * eff) + runs * 4e-9, rel=1e-12)


def test_direct_conv_reorders_weights_each_call() -> None:
    op = only_op("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1")
    kc = cpu_kernel_cost(op, cpu_device())
    w = 64 * 64 * 9 * 4
    eff = 0.8 * (3136 / 3144) * (64 / 80) * (576 / 580)
    assert kc.compute_s == pytest.approx(op.flops / (FP32 * eff) + 2 * w / 200e9, rel=1e-12)
    assert kc.latency_s == pytest.approx(OVERHEAD + LIB)


def test_flash_attention_pairs_follow_the_kernel_blocks() -> None:
    assert _flash_pairs(512, 512, False) == (512 * 512, 64, 512)
    # causal, q blocks of 256: keys up to each block's end, 256 + 512 + 768 + 1024
    assert _flash_pairs(1024, 1024, True) == (256 * (256 + 512 + 768 + 1024), 256, 512)
    assert _flash_pairs(100, 100, True)[1:] == (32, 100)


def test_flash_attention_block_products_run_at_the_large_gemm_fraction() -> None:
    """Hand-computed: 1x2 heads, 512 tokens, d=64, not causal: q blocks of 64, one key block of 512."""
    kc = cpu_kernel_cost(only_op("attention:b=1,h=2,s=512,d=64,causal=0"), cpu_device())
    pairs = 2 * 512 * 512
    gemm = 2.0 * pairs * (64 + 64) / (FP32 * 0.5)  # gemm_peak_fraction 0.5, no small-side factors
    softmax = 5 * pairs / (FP32 * 0.25) + pairs * 1e-9  # SOFTMAX_FLOPS at the vector fraction, one exp per pair
    assert kc.rule == "cpu-flash-attention" and kc.tile == "q64xkv512"
    assert kc.compute_s == pytest.approx(gemm + softmax, rel=1e-12)


def test_special_functions_cost_per_element() -> None:
    dev = cpu_device()
    n = 2**20
    gelu = cpu_kernel_cost(only_op(f"elementwise:numel={n},op=gelu"), dev)
    relu = cpu_kernel_cost(only_op(f"elementwise:numel={n},op=relu"), dev)
    assert gelu.rule == "cpu-vector-tanh" and relu.rule == "cpu-vector"
    assert gelu.compute_s == pytest.approx(8 * n / (FP32 * 0.25) + n * 2e-9, rel=1e-12)
    soft = cpu_kernel_cost(only_op("softmax:rows=64,cols=1024"), dev)
    assert soft.compute_s == pytest.approx(5 * 65536 / (FP32 * 0.25) + 65536 * 1e-9, rel=1e-12)


def test_missing_special_function_is_a_located_error_not_a_zero() -> None:
    dev = cpu_device(special_function_s={"exp": 1e-9})
    assert cpu_kernel_cost(only_op("elementwise:numel=1024,op=silu"), dev).rule == "cpu-vector-exp"
    with pytest.raises(SpecError, match=r"toy-cpu: cpu\.special_function_s\.tanh: missing; got exp"):
        cpu_kernel_cost(only_op("elementwise:numel=1024,op=gelu"), dev)


def test_memory_level_by_working_set() -> None:
    dev = cpu_device()
    small = cpu_kernel_cost(only_op("copy:bytes=262144"), dev)  # 512 KiB moved: L2
    big = cpu_kernel_cost(only_op("copy:bytes=67108864"), dev)  # 128 MiB moved: DRAM
    assert small.memory_s == pytest.approx(2 * 262144 / 200e9) and small.dram_bytes == 0
    assert big.memory_s == pytest.approx(2 * 67108864 / 20e9) and big.dram_bytes == 2 * 67108864


def test_host_spec_cpu_fields_are_measured_or_derived() -> None:
    from hwmodels.host import host_spec

    dev = host_spec(1)
    assert dev.cpu is not None
    for path in ("cpu.special_function_s.exp", "cpu.special_function_s.tanh", "cpu.strided_copy_run_s",
                 "cpu.library_call_overhead_s", "efficiency.launch_overhead_s"):
        assert dev.source_of(path).source.startswith("measured: host probe"), path
    for side in "mnk":
        assert dev.source_of(f"cpu.gemm_half_{side}").source.startswith("derived: ")
    assert all(v > 0 for v in dev.cpu.special_function_s.values())
    l2 = dev.level("l2")
    assert "per core used" in dev.source_of("memory.l2.capacity_bytes").note
    assert l2.capacity_bytes <= host_spec(None).level("l2").capacity_bytes


def test_host_spec_levels_are_consistent_and_clamps_are_flagged() -> None:
    """No cache level of the probed host is slower than the level behind it (issue 11)."""
    from hwmodels.host import host_spec

    dev = host_spec(1)
    for outer, inner in zip(dev.memory, dev.memory[1:], strict=False):
        assert inner.read_bandwidth_bytes_per_s >= outer.read_bandwidth_bytes_per_s, inner.name
        assert inner.latency_s <= outer.latency_s, inner.name
        src = dev.source_of(f"memory.{inner.name}.read_bandwidth_bytes_per_s").source
        assert src.startswith("measured: host probe")
        if inner.read_bandwidth_bytes_per_s == outer.read_bandwidth_bytes_per_s:
            assert "clamped: probe gave" in src


def _copy_cost(nbytes: int, dev: DeviceSpec):  # noqa: ANN202 - KernelCost
    return cpu_kernel_cost(only_op(f"copy:bytes={nbytes}"), dev)


def test_intel_kvm_guest_streaming_ops_are_priced_at_dram_speed_or_faster(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path) -> None:  # noqa: ANN001
    """Issue 11 simulated (no Intel guest available): a 2-vCPU Xeon KVM guest reporting a 480 MiB L3.

    Before, every working set up to 480 MiB was priced at an "L3" probed slower than DRAM; now a
    DRAM-sized copy is priced at the DRAM probe, an L3-sized one at the L3 probe, and time per byte
    never falls as the working set grows.
    """
    from tests.hwmodels.test_host import BW, intel_guest_spec

    dev = intel_guest_spec(monkeypatch, tmp_path)
    big = _copy_cost(64 * 2**20, dev)  # 128 MiB moved
    assert big.notes.startswith("working set in dram") and big.memory_s == pytest.approx(2 * 64 * 2**20 / BW["dram"])
    mid = _copy_cost(2 * 2**20, dev)  # 4 MiB moved: within the 8 MiB usable L3
    assert mid.notes.startswith("working set in l3") and mid.memory_s == pytest.approx(4 * 2**20 / BW["l3"])
    per_byte = [_copy_cost(2**k, dev).memory_s / 2**k for k in range(12, 29)]
    assert all(a <= b * (1 + 1e-12) for a, b in zip(per_byte, per_byte[1:], strict=False))
    assert max(per_byte) == pytest.approx(2 / BW["dram"])


def test_default_cpu_params_fit_the_cache_levels_a_device_has() -> None:
    import dataclasses

    from simulator.calibration.fit import DEFAULT_PARAMS, _levels_present, _params

    dev = cpu_device()
    paths = set(_levels_present(DEFAULT_PARAMS["cpu"], dev))
    assert {"memory.dram.read_bandwidth_bytes_per_s", "memory.l3.read_bandwidth_bytes_per_s",
            "memory.l2.read_bandwidth_bytes_per_s"} <= paths
    no_l3 = dataclasses.replace(dev, memory=tuple(lv for lv in dev.memory if lv.name != "l3"))
    kept = _levels_present(DEFAULT_PARAMS["cpu"], no_l3)
    assert "memory.l3.read_bandwidth_bytes_per_s" not in kept and "memory.l2.read_bandwidth_bytes_per_s" in kept
    params = {p.path: p for p in _params(kept, no_l3)}  # resolves: no unknown level
    l2 = params["memory.l2.read_bandwidth_bytes_per_s"]
    assert (l2.lower, l2.upper) == pytest.approx((0.5 * 200e9, 4 * 200e9))


def test_a_cpu_without_the_library_path_runs_bf16_in_the_portable_loops() -> None:
    # hwmodels.host lists the dtype in cpu.reference_gemm_flops_per_s: matmul, the GEMM of a convolution
    # (im2col: oneDNN's convolution needs the same ISA) and the attention block products run at that rate
    ref = 1.5e9
    dev = cpu_device(reference_gemm_flops_per_s={"bf16": ref})
    gemm = only_op("gemm:m=64,n=32,k=128", "bf16")
    kc = cpu_kernel_cost(gemm, dev)
    assert kc.rule == "cpu-reference-gemm" and kc.latency_s == OVERHEAD
    assert kc.compute_s == pytest.approx(2 * 64 * 32 * 128 / ref, rel=1e-12)
    conv = only_op("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1", "bf16")
    assert conv_path(conv, dev) == "im2col" and conv_path(conv, cpu_device()) == "direct"
    kc = cpu_kernel_cost(conv, dev)
    assert kc.rule == "cpu-im2col-gemm" and kc.compute_s == pytest.approx(conv.flops / ref + 64 * 9 * 56 * 4e-9)
    att = only_op("attention:b=1,h=2,s=64,d=32,causal=0", "bf16")
    kc = cpu_kernel_cost(att, dev)
    pairs = 2 * 64 * 64
    matrix_s = 2.0 * pairs * (32 + 32) / ref
    assert kc.compute_s > matrix_s and kc.compute_s - matrix_s < 0.05 * matrix_s
    # fp32 keeps its path, and so does bf16 on a CPU whose library runs it
    assert cpu_kernel_cost(only_op("gemm:m=64,n=32,k=128"), dev).rule == "cpu-blas-gemm"
    assert cpu_kernel_cost(gemm, cpu_device()).rule == "cpu-dnn-gemm"


def test_the_fit_drops_the_fields_of_a_path_the_cpu_does_not_take() -> None:
    from simulator.calibration.fit import DEFAULT_PARAMS, _levels_present, _params

    library = set(_levels_present(DEFAULT_PARAMS["cpu"], cpu_device()))
    assert "compute.tensor_flops_per_s.bf16" in library
    assert not any(p.startswith("cpu.reference_gemm_flops_per_s") for p in library)
    dev = cpu_device(reference_gemm_flops_per_s={"bf16": 1.5e9})
    kept = _levels_present(DEFAULT_PARAMS["cpu"], dev)
    assert "cpu.reference_gemm_flops_per_s.bf16" in kept and "compute.tensor_flops_per_s.bf16" not in kept
    assert "cpu.reference_gemm_flops_per_s.fp16" not in kept
    ref = {p.path: p for p in _params(kept, dev)}["cpu.reference_gemm_flops_per_s.bf16"]
    assert (ref.lower, ref.upper) == pytest.approx((0.3 * 1.5e9, 3 * 1.5e9))


def _spill_device(spill: float) -> DeviceSpec:
    import dataclasses

    dev = cpu_device()
    mem = tuple(dataclasses.replace(lv, capacity_bytes=8 * 2**20, spill_bytes=spill) if lv.name == "l3" else lv
                for lv in dev.memory)
    return dataclasses.replace(dev, memory=mem)


def test_a_working_set_past_a_soft_cache_edge_is_served_partly_from_the_cache() -> None:
    """Between the L3's capacity (8 MiB) and its spill size (32 MiB) the L3 serves ln(32/W)/ln(32/8) of the bytes."""
    from simulator.lowering.cpu import memory_split

    dev = _spill_device(32 * 2**20)
    l3 = dev.level("l3")
    assert [(lv.name, sh) for lv, sh in memory_split(dev, 16 * 2**20)] == [("l3", pytest.approx(0.5)),
                                                                           ("dram", pytest.approx(0.5))]
    assert [lv.name for lv, _ in memory_split(dev, 8 * 2**20)] == ["l3"]  # held whole
    assert [lv.name for lv, _ in memory_split(dev, 32 * 2**20)] == ["dram"]  # beyond the spill: none hits
    kc = _copy_cost(8 * 2**20, dev)  # 16 MiB moved: half from each, hand-computed
    moved = 16 * 2**20
    assert kc.memory_s == pytest.approx(0.5 * moved / 100e9 + 0.5 * moved / 20e9)
    assert kc.dram_bytes == pytest.approx(moved / 2) and kc.l2_bytes == pytest.approx(moved / 2)
    assert "50% from l3, 50% from dram" in kc.notes
    share12 = math.log(32 / 12) / math.log(32 / 8)  # 12 MiB: an fp32 add of 1M elements
    add = cpu_kernel_cost(only_op("elementwise:numel=1048576,op=add"), dev)
    assert add.memory_s == pytest.approx(12 * 2**20 * (share12 / 100e9 + (1 - share12) / 20e9))
    # a sharp edge (spill 0, the default) prices the same working set at DRAM speed, as before
    sharp = _copy_cost(8 * 2**20, _spill_device(0.0))
    assert sharp.memory_s == pytest.approx(moved / 20e9) and sharp.l2_bytes == 0
    assert l3.capacity_bytes == 8 * 2**20


def test_layernorm_adds_its_latency_bound_row_moments_to_the_roofline() -> None:
    op = only_op("layernorm:rows=4096,cols=1024")
    plain = cpu_kernel_cost(op, cpu_device())
    chained = cpu_kernel_cost(op, cpu_device(row_moments_s=0.25e-9))
    assert plain.rule == "cpu-vector" and chained.rule == "cpu-vector-row-moments"
    assert chained.latency_s - plain.latency_s == pytest.approx(4096 * 1024 * 0.25e-9)
    assert (chained.compute_s, chained.memory_s) == (plain.compute_s, plain.memory_s)
    assert chained.device_time_s == pytest.approx(plain.device_time_s + 4096 * 1024 * 0.25e-9)
    # softmax has no Welford chain
    sm = only_op("softmax:rows=4096,cols=1024")
    assert cpu_kernel_cost(sm, cpu_device(row_moments_s=0.25e-9)).latency_s == OVERHEAD


def test_host_row_moments_are_derived_from_the_fp_latencies() -> None:
    from hwmodels.host import host_spec, read_host_info

    dev = host_spec(1)
    info = read_host_info()
    lanes = max(1, info.simd_bits // 32)
    src = dev.source_of("cpu.row_moments_s").source
    assert src.startswith("derived: (") and f"{lanes}-lane fp32 vector" in src
    ua = info.microarch
    add, fma = (ua.fadd_latency, ua.fma_latency) if ua is not None and ua.fadd_latency else (4, 4)
    assert dev.cpu.row_moments_s == pytest.approx((add + fma) / lanes / info.clock_hz)
    from simulator.calibration.fit import DEFAULT_PARAMS, _levels_present

    assert "cpu.row_moments_s" in _levels_present(DEFAULT_PARAMS["cpu"], dev)
    assert "cpu.row_moments_s" not in _levels_present(DEFAULT_PARAMS["cpu"], cpu_device())  # 0: nothing to fit

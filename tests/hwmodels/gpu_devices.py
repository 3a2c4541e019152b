"""Test fixtures: GPU DeviceSpecs built in Python from datasheet numbers (independent of the catalog).

H100 SXM5 80GB: NVIDIA H100 datasheet / Hopper whitepaper (132 SMs, 989.4 TFLOP/s dense BF16 at the
1830 MHz tensor clock, 66.9 TFLOP/s FP32, 3.35 TB/s HBM3, 50 MB L2, 228 KB shared memory per SM,
700 W); latencies from MT4G (caps-tum/mt4g sample_results, H100 80GB HBM3). Efficiency factors here
are round test values, not calibrated: tests derive expectations from whatever they are.
"""

from __future__ import annotations

from hwmodels.spec import (
    ClockSpec,
    ComputeSpec,
    DeviceSpec,
    EfficiencySpec,
    EnergySpec,
    MemoryLevel,
    PowerSpec,
    SMSpec,
)

__all__ = ["h100", "toy_gpu"]


def h100(**eff: float) -> DeviceSpec:
    """An H100-SXM5-80GB-like device; keyword arguments override efficiency fields."""
    e = dict(
        tensor_peak_fraction=0.8,
        vector_peak_fraction=0.8,
        dram_bandwidth_fraction=0.9,
        l2_bandwidth_fraction=0.9,
        bandwidth_half_size_bytes=4e6,
        launch_overhead_s=4e-6,
        graph_launch_overhead_s=1.5e-6,
    )
    e.update(eff)
    return DeviceSpec(
        name="test-h100",
        kind="gpu",
        vendor="NVIDIA",
        arch="hopper",
        description="H100-like test device",
        clock=ClockSpec(boost_hz=1.98e9, sustained_hz=1.83e9),
        compute=ComputeSpec(
            units=132,
            tensor_flops_per_s={"tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8_e4m3": 1978.9e12},
            vector_flops_per_s={"fp64": 33.5e12, "fp32": 66.9e12, "bf16": 133.8e12, "fp16": 133.8e12},
        ),
        memory=(
            MemoryLevel("hbm", 80e9, 3.35e12, 3.35e12, 834 / 1.98e9, 3.97e-12 * 8),
            MemoryLevel("l2", 50e6, 9.0e12, 9.0e12, 219 / 1.98e9, 0.6e-12 * 8),
            MemoryLevel("smem", 132 * 228 * 1024, 132 * 128 * 1.83e9, 132 * 128 * 1.83e9, 30 / 1.98e9, 0.1e-12 * 8),
        ),
        power=PowerSpec(tdp_w=700.0, idle_w=90.0),
        energy=EnergySpec(
            tensor_j_per_flop={"bf16": 0.25e-12, "fp16": 0.25e-12, "fp8_e4m3": 0.15e-12, "tf32": 0.5e-12},
            vector_j_per_flop={"fp32": 1.0e-12, "bf16": 0.6e-12, "fp16": 0.6e-12, "fp64": 2e-12},
        ),
        efficiency=EfficiencySpec(**e),
        sm=SMSpec(
            registers_per_sm=65536,
            shared_mem_per_sm_bytes=228 * 1024,
            max_shared_mem_per_cta_bytes=227 * 1024,
            l1_bytes=256 * 1024,
            max_threads_per_sm=2048,
            max_ctas_per_sm=32,
        ),
    )


def toy_gpu(**eff: float) -> DeviceSpec:
    """A small round-number GPU for hand calculations: 4 SMs at 1 GHz, 4096 FLOP/clk/SM bf16.

    bf16 tensor peak 16.384 TFLOP/s (4 x 4096 x 1e9); FP32 vector 1.024 TFLOP/s (128 lanes x 2 x 4 SMs
    x 1 GHz); DRAM 1 TB/s with 100 ns latency; L2 4 MiB at 4 TB/s; 228 KiB shared memory per SM.
    All efficiency factors are 1 and the half-bandwidth size is zero unless overridden.
    """
    e = dict(
        tensor_peak_fraction=1.0,
        vector_peak_fraction=1.0,
        dram_bandwidth_fraction=1.0,
        l2_bandwidth_fraction=1.0,
        bandwidth_half_size_bytes=0.0,
        launch_overhead_s=2e-6,
        graph_launch_overhead_s=1e-6,
    )
    e.update(eff)
    return DeviceSpec(
        name="toy-gpu",
        kind="gpu",
        vendor="test",
        arch="hopper",
        description="round-number test GPU",
        clock=ClockSpec(boost_hz=1e9, sustained_hz=1e9),
        compute=ComputeSpec(
            units=4,
            tensor_flops_per_s={"bf16": 4 * 4096 * 1e9, "fp16": 4 * 4096 * 1e9},
            vector_flops_per_s={"fp32": 4 * 128 * 2 * 1e9, "bf16": 4 * 128 * 2 * 1e9},
        ),
        memory=(
            MemoryLevel("hbm", 16 * 2**30, 1e12, 1e12, 100e-9, 32e-12),
            MemoryLevel("l2", 4 * 2**20, 4e12, 4e12, 20e-9, 4e-12),
        ),
        power=PowerSpec(tdp_w=100.0, idle_w=20.0),
        energy=EnergySpec(
            tensor_j_per_flop={"bf16": 1e-12, "fp16": 1e-12},
            vector_j_per_flop={"fp32": 2e-12, "bf16": 2e-12},
        ),
        efficiency=EfficiencySpec(**e),
        sm=SMSpec(
            registers_per_sm=65536,
            shared_mem_per_sm_bytes=228 * 1024,
            max_shared_mem_per_cta_bytes=227 * 1024,
            l1_bytes=256 * 1024,
            max_threads_per_sm=2048,
            max_ctas_per_sm=32,
        ),
    )

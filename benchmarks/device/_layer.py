"""One eager transformer layer, forward and backward, with the time of every kernel it launches.

The layer is a one-layer Llama-2-7B (``llama_layer.json``: Llama-2-7B's published config.json with
``num_hidden_layers`` 1; embedding and LM head included), built as the project's graph and executed
by ``simulator.calibration.executor`` with eager torch, so the kernels are those the model prices.
``torch.profiler`` records each kernel's device time over a few steps after warm-up; the rows give
the kernel name, the calls per step and the mean time per call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Profiled steps after warm-up.
STEPS = 5


def kernel_rows(torch: Any, runner: Any, device: str, phase: str, steps: int = STEPS) -> list[dict[str, str]]:
    """Per-kernel rows of ``steps`` executions of ``runner`` under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    gpu = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    for _ in range(2):
        runner()
    runner.synchronize()
    with profile(activities=acts) as prof:
        for _ in range(steps):
            runner()
        runner.synchronize()
    rows = []
    for ev in prof.key_averages():
        if gpu:
            if "CUDA" not in str(getattr(ev, "device_type", "")):
                continue  # host-side entries (aten ops) carry no kernel time of their own
            t_us = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0)
        else:
            t_us = ev.self_cpu_time_total
        if not t_us or not ev.count:
            continue
        rows.append({"phase": phase, "kernel": ev.key, "calls_per_step": repr(ev.count / steps),
                     "mean_s": repr(t_us * 1e-6 / ev.count), "total_per_step_s": repr(t_us * 1e-6 / steps)})
    return sorted(rows, key=lambda r: -float(r["total_per_step_s"]))


def layer_cases(dry: bool) -> tuple[Path, int, int, str]:
    """(config file, batch, seq, dtype) of the profiled layer."""
    if dry:
        return HERE / "tiny_layer.json", 2, 32, "fp32"
    return HERE / "llama_layer.json", 1, 2048, "bf16"

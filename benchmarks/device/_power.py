"""Board power and SM clock while a kernel runs back to back for seconds.

A :class:`Sampler` reads the board's power draw (W) and SM clock (Hz) every ``interval_s`` on a
background thread: through NVML (``pynvml``, the ``nvidia-ml-py`` package) when importable, else by
running ``nvidia-smi --query-gpu=power.draw,clocks.sm --format=csv,noheader,nounits -lms N`` and
reading its lines. NVML's ``nvmlDeviceGetPowerUsage`` is the board power in mW; on Hopper it is an
average over a short window (NVIDIA, "nvidia-smi" manual, ``power.draw`` vs ``power.draw.instant``),
so the loop runs for seconds and the first ``settle_s`` of samples are dropped (the board and its
clocks settle).

:func:`power_row` turns one loop into a row of the energy schema
(``simulator.calibration.energy_validation.ENERGY_COLUMNS``): mean power over the settled samples,
the kernel's time from the loop (wall time / executions, synchronised at the end), energy per
execution = power x time. The achieved SM clock (mean, min) goes in the notes.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Seconds of a loop whose samples are dropped before averaging (clocks and power settle).
SETTLE_S = 1.0


@dataclass
class Sampler:
    """Background sampling of (time, power W, SM clock Hz) for one GPU."""

    index: int = 0
    interval_s: float = 0.05
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    backend: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _proc: Any = None

    def available(self) -> str:
        """Pick a backend; returns "" when one works, else why none does."""
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self._nvml = pynvml
            self.backend = "nvml"
            return ""
        except Exception as exc:  # noqa: BLE001 - NVML missing or failing: try nvidia-smi
            why = f"NVML: {exc.__class__.__name__}: {exc}"
        if shutil.which("nvidia-smi") is None:
            return f"{why}; nvidia-smi not found on PATH"
        self.backend = "nvidia-smi"
        return ""

    def start(self) -> None:
        self.samples.clear()
        self._stop.clear()
        target = self._nvml_loop if self.backend == "nvml" else self._smi_loop
        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[float, float, float]]:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._proc = None
        return list(self.samples)

    def _nvml_loop(self) -> None:
        nv, h = self._nvml, self._handle
        while not self._stop.is_set():
            w = nv.nvmlDeviceGetPowerUsage(h) / 1e3
            hz = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) * 1e6
            self.samples.append((time.perf_counter(), w, hz))
            time.sleep(self.interval_s)

    def _smi_loop(self) -> None:
        cmd = ["nvidia-smi", f"--id={self.index}", "--query-gpu=power.draw,clocks.sm", "--format=csv,noheader,nounits",
               f"-lms={max(10, int(self.interval_s * 1e3))}"]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append((time.perf_counter(), float(parts[0]), float(parts[1]) * 1e6))
            except (ValueError, IndexError):
                continue  # "[N/A]" or a partial line


@dataclass(frozen=True)
class Loop:
    """One back-to-back loop: executions, wall seconds, and the samples taken meanwhile."""

    executions: int
    wall_s: float
    t0: float
    samples: tuple[tuple[float, float, float], ...]

    def settled(self, settle_s: float = SETTLE_S) -> list[tuple[float, float, float]]:
        return [s for s in self.samples if s[0] >= self.t0 + settle_s]


def run_loop(run: Callable[[], Any], sync: Callable[[], None], sampler: Sampler, seconds: float) -> Loop:
    """Run ``run()`` back to back for at least ``seconds`` (synchronising every ~0.1 s) while sampling."""
    sync()
    sampler.start()
    t0 = time.perf_counter()
    n, batch = 0, 1
    while True:
        t = time.perf_counter()
        for _ in range(batch):
            run()
        sync()
        n += batch
        if time.perf_counter() - t < 0.1:
            batch *= 2
        if time.perf_counter() - t0 >= seconds:
            break
    wall = time.perf_counter() - t0
    return Loop(n, wall, t0, tuple(sampler.stop()))


def power_row(loop: Loop, *, rid: str, kind: str, workload: str, dtype: str, device: str, framework: str,
              settle_s: float = SETTLE_S) -> dict[str, str] | None:
    """The energy-schema row of ``loop`` (None when no settled sample was taken)."""
    s = loop.settled(settle_s)
    if not s:
        return None
    power = sum(x[1] for x in s) / len(s)
    clocks = [x[2] for x in s]
    latency = loop.wall_s / loop.executions
    return {
        "id": rid, "kind": kind, "workload": workload, "dtype": dtype, "device": device, "framework": framework,
        "latency_s": repr(latency), "energy_j": repr(power * latency), "energy_per": "execution",
        "power_w": repr(power), "power_stat": f"mean of {len(s)} samples over a {loop.wall_s:.1f} s back-to-back "
                                               f"loop, first {settle_s:g} s dropped",
        "power_covers": "gpu-board", "in_score": "1",
        "metric_reported": f"{loop.executions} executions in {loop.wall_s:.3f} s; {power:.1f} W",
        "source": "measured: benchmarks/device/run.py (power part)",
        "notes": f"achieved SM clock mean {sum(clocks) / len(clocks) / 1e6:.0f} MHz, min {min(clocks) / 1e6:.0f} MHz; "
                 "latency = loop wall time / executions (synchronised every ~0.1 s)",
    }

"""What the device run records about the machine: GPU, driver, clocks, power limit, library versions.

Everything is read, nothing assumed: ``nvidia-smi --query-gpu`` for the board's clocks, power limits
and state; torch for its own, CUDA's and cuDNN's versions; cuBLASLt's version from the library itself.
A field that cannot be read is left out and the reason is kept under ``unreadable``.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import platform
import shutil
import socket
import subprocess
from typing import Any

#: ``nvidia-smi --query-gpu`` fields (names as ``nvidia-smi --help-query-gpu`` lists them).
SMI_FIELDS = ("name", "pci.bus_id", "driver_version", "vbios_version", "memory.total", "persistence_mode",
              "power.limit", "power.default_limit", "power.max_limit", "enforced.power.limit",
              "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics",
              "clocks.applications.memory", "temperature.gpu", "ecc.mode.current", "compute_mode",
              "mig.mode.current", "pstate", "clocks_throttle_reasons.active")


def smi_query(fields: tuple[str, ...] = SMI_FIELDS, index: int = 0) -> tuple[dict[str, str], str]:
    """The board's ``nvidia-smi`` fields for GPU ``index`` (name -> text), or ({}, why not)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}, "nvidia-smi not found on PATH"
    values: dict[str, str] = {}
    for f in fields:  # one query per field: an unknown field on an older driver fails alone
        try:
            out = subprocess.run([exe, f"--id={index}", f"--query-gpu={f}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return values, f"nvidia-smi failed: {exc}"
        if out.returncode == 0 and out.stdout.strip():
            values[f] = out.stdout.strip().splitlines()[0]
    return values, ""


def cublaslt_version() -> tuple[str, str]:
    """cuBLASLt's version as the loaded library reports it (``cublasLtGetVersion``), or ("", why not)."""
    for name in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.cublasLtGetVersion.restype = ctypes.c_size_t
        v = int(lib.cublasLtGetVersion())
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}", ""
    return "", "libcublasLt not loadable"


def torch_versions(torch: Any, device: str) -> dict[str, Any]:
    """torch, CUDA/HIP, cuDNN versions and the device's properties as torch sees them."""
    info: dict[str, Any] = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda,
                            "hip": getattr(torch.version, "hip", None)}
    if torch.backends.cudnn.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(torch.device(device))
        info.update(device_name=p.name, capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                    memory_bytes=p.total_memory)
    return info


def collect(device: str, torch: Any | None, catalog_name: str | None) -> dict[str, Any]:
    """The metadata record of this run (written as metadata.json)."""
    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "host": socket.gethostname(), "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(), "device": device, "catalog_device": catalog_name,
        "unreadable": {},
    }
    if torch is not None:
        meta["versions"] = torch_versions(torch, device)
    else:
        meta["unreadable"]["versions"] = "torch is not installed"
    if device.startswith("cuda"):
        idx = int(device.split(":")[1]) if ":" in device else 0
        smi, why = smi_query(index=idx)
        meta["nvidia_smi"] = smi
        if why:
            meta["unreadable"]["nvidia_smi"] = why
        lt, why = cublaslt_version()
        if lt:
            meta.setdefault("versions", {})["cublaslt"] = lt
        else:
            meta["unreadable"]["cublaslt"] = why
    return meta

"""Describe the machine's own CPU as a DeviceSpec (kind ``"cpu"``) from /proc, /sys, lscpu and short probes.

The host is a device like any catalog entry (``--hardware host``), so calibration works end to end on
machines without accelerators. Every number records where it came from: ``/proc/cpuinfo`` (cores,
SIMD flags, clock), ``lscpu -C`` or ``/sys/devices/system/cpu`` (cache sizes and how many CPUs share
each), ``/proc/meminfo`` (memory size), ``measured: host probe ...`` (bandwidths, latencies and the
per-call overhead, timed here with NumPy), or ``derived: ...`` with the formula. The efficiency
factors start from explicitly stated nominal values; :mod:`simulator.calibration` fits them to
measurements. ``nodeperf hardware show host`` prints all of it (:func:`describe_host`).

Peak FLOP rates are ``cores x clock x FMA pipes x lanes x 2`` (a fused multiply-add counts 2 FLOP).
The number of FMA pipes and their datapath width are not visible in /proc/cpuinfo; they come from a
small table of microarchitectures with the vendor's optimisation guide as the source, and otherwise
from an assumption stated in the provenance (one FMA pipe as wide as the widest SIMD flag).

Rules that keep the probes meaningful on any machine (bare metal, hypervisor guest, container):

* **Probe sizes come from the detected hierarchy** (:func:`probe_plan`). Each copy probe moves a
  working set (source + destination) inside its level: half of one L2 instance for the L2; for
  DRAM, two arrays of ``max(4 x L3 (all instances), 64 MiB)`` each, at most 256 MiB and an eighth of
  the memory. The L3 is probed over a ladder of working sets doubling from twice the L2 up to a top:
  the reported L3 instance, at most 256 MiB.
* **The usable L3 is measured, not taken from the report** (:func:`l3_from_ladder`): it is the
  largest ladder step whose copy bandwidth is still at least the geometric mean of the fastest step
  and DRAM; the L3's bandwidth is the fastest step within half of it. Other tenants of a shared L3
  (a guest's host cores, other jobs) leave a single thread less than the reported size: on the 2-vCPU
  AMD EPYC KVM guest the reported 32 MiB copies at L3 speed only up to about 16 MiB.
* **Hypervisor guests: the ladder is capped.** A guest sees the host's whole L3 (a KVM guest on a
  Xeon 6980P reports 480 MiB) but not the host cores that share it, so "capacity / CPUs sharing it"
  computed inside the guest (2 vCPUs) is no share at all. In a guest (``lscpu``'s ``Hypervisor
  vendor``, the ``hypervisor`` flag of /proc/cpuinfo, or /sys/hypervisor/type) the ladder's top is at
  most :data:`GUEST_L3_BYTES_PER_CPU` for each of the guest's CPUs that share the instance; the
  usable L3 is then measured below that top, and the spec's L3 level has that size (a larger working
  set is priced at DRAM speed). Bare metal keeps the reported instance as the top.
* **Probes cannot contradict each other** (:func:`clamp_levels`): a cache level measured slower
  (lower bandwidth, or higher latency) than the level behind it, DRAM included, is clamped to that
  level's value; the spec's source string says so (``...; clamped: probe gave X < dram Y``) and a
  warning is logged. Calibration can then raise the level's bandwidth (it is a fitted parameter).
* **Nothing unreadable is silently defaulted.** Without /proc/cpuinfo, /sys (containers), lscpu or
  /proc/meminfo the stated fallback (ISA baseline SIMD width, an assumed clock, no cache levels,
  ``sysconf`` memory size) is recorded in :attr:`HostInfo.fallbacks`, in the provenance, and logged.
* **Probes are cached per machine** (:func:`probe_host`): JSON under ``$NODEPERF_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/nodeperf``, else ``~/.cache/nodeperf``, named by a hash of the CPU model, core
  counts, cache sizes, memory size, hypervisor and :data:`PROBE_VERSION`, so ``--hardware host`` does
  not re-probe on every run. ``NODEPERF_NO_CACHE=1`` disables it; delete the file to re-probe. A
  corrupt file is ignored with a warning and rewritten. Probes timed on a busy machine (1-minute load
  average at least the number of online CPUs) are warned about and replaced by the next quieter run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import hashlib
import json
import logging
import math
import os
import platform
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hwmodels.spec import (
    ClockSpec,
    ComputeSpec,
    CpuSpec,
    DeviceSpec,
    EfficiencySpec,
    EnergySpec,
    MemoryLevel,
    PowerSpec,
    Provenance,
)

__all__ = [
    "HostInfo",
    "ProbePlan",
    "HostProbes",
    "read_host_info",
    "probe_plan",
    "probe_host",
    "probe_cache_dir",
    "clamp_levels",
    "l3_from_ladder",
    "L3Result",
    "detect_host",
    "host_spec",
    "host_report",
    "describe_host",
    "HOST_NAME",
    "PROBE_VERSION",
    "GUEST_L3_BYTES_PER_CPU",
    "LOW_PRECISION_LIBRARY_FLAGS",
    "REFERENCE_GEMM_FLOP_PER_CYCLE",
    "low_precision_library",
]

logger = logging.getLogger(__name__)

#: The device name of this machine's CPU in measurement files and ``--hardware``.
HOST_NAME = "host"

#: Version of the probe code and of :func:`probe_plan`'s rules; part of the cache key. Bump it when
#: either changes what a probe measures (3: source and destination of the copy probes placed half a page
#: apart, :func:`skewed_pair`).
PROBE_VERSION = 3

#: PyTorch's CPU dispatch of reduced-precision contractions (``mkldnn_bf16_device_check`` and
#: ``mkldnn_fp16_device_check``, aten/src/ATen/native/mkldnn/Utils.h, whose error text reads "bf16 path
#: needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq" and "fp16 path needs the cpu
#: support avx_ne_convert or avx512_fp16"): on x86-64, /proc/cpuinfo flag sets any one of which enables
#: oneDNN's path for the dtype. Without them a bf16/fp16 matmul (and the GEMMs of a convolution or of the
#: CPU flash-attention kernel) runs ATen's portable loops (aten/src/ATen/native/cpu/BlasKernel.cpp).
LOW_PRECISION_LIBRARY_FLAGS: dict[str, tuple[frozenset[str], ...]] = {
    "bf16": (frozenset({"avx512bw", "avx512vl", "avx512dq"}), frozenset({"avx_ne_convert"}),
             frozenset({"amx_bf16"})),
    "fp16": (frozenset({"avx512_fp16"}), frozenset({"avx_ne_convert"}), frozenset({"amx_fp16"})),
}

#: FLOP per clock cycle of those portable loops (one thread: a second thread did not change the rate).
#: Measured (benchmarks/bench_reference_gemm.py): torch 2.13.0+cpu on a 2-core AMD EPYC (Zen 3, AVX2
#: without AVX-512) KVM guest at 2.445 GHz, the quick suite's ten bf16 GEMM shapes in bf16 and fp16,
#: median over the twenty (0.549); the shapes spread from 0.20 to 1.43 FLOP/cycle (in-cache shapes up to
#: 128 fastest, shapes with a large output or deep K slowest: the loops walk one operand with a stride and
#: write the output with another), so a shape may sit a factor of two or more off this figure.
REFERENCE_GEMM_FLOP_PER_CYCLE = 0.549


def low_precision_library(info: HostInfo, dtype: str) -> tuple[bool, str]:
    """Whether PyTorch runs ``dtype`` (``bf16``/``fp16``) contractions through oneDNN on this CPU, and why.

    x86-64: :data:`LOW_PRECISION_LIBRARY_FLAGS`. arm64: bf16 needs the BF16 extension ("bf16" in the
    /proc/cpuinfo Features, ``mkldnn_bf16_device_check_arm``); fp16 never takes oneDNN there
    (``mkldnn_fp16_device_check`` returns false off x86-64), and a matmul (not a matrix-vector product)
    runs the portable loops of BlasKernel.cpp. Another ISA keeps the library path (nothing checked).
    """
    machine = platform.machine().lower()
    x86 = machine in ("x86_64", "amd64", "i686", "i386") or bool(info.flags & {"sse2", "avx", "avx2"})
    arm = machine in ("aarch64", "arm64") or bool(info.flags & {"asimd"})
    loops = "ATen's portable GEMM loops"
    if arm:
        if dtype == "bf16" and "bf16" in info.flags:
            return True, "oneDNN path: /proc/cpuinfo Features bf16 (Arm BF16 extension)"
        why = ("no bf16 in /proc/cpuinfo Features for PyTorch's oneDNN bf16 path on Arm" if dtype == "bf16"
               else "PyTorch's oneDNN fp16 path is x86-64 only")
        return False, f"{loops} ({why}; their rate per cycle is the one measured on x86-64, assumed)"
    if not x86:
        return True, f"library path assumed: PyTorch's dispatch not checked for {machine or 'this ISA'}"
    for need in LOW_PRECISION_LIBRARY_FLAGS[dtype]:
        if need <= info.flags:
            return True, f"oneDNN path: /proc/cpuinfo flags {' + '.join(sorted(need))}"
    alts = " or ".join(" + ".join(sorted(n)) for n in LOW_PRECISION_LIBRARY_FLAGS[dtype])
    return False, f"{loops} (no {alts} in /proc/cpuinfo flags for PyTorch's oneDNN {dtype} path)"


#: Largest L3 a hypervisor guest may use per guest CPU sharing an L3 instance (bytes): the top of the
#: L3 probe ladder in a guest (the usable part below it is measured). L3 per core of the many-core
#: server parts that hosts slice into guests: AMD EPYC 9004/9005 4 MiB (32 MiB per 8-core CCD), the
#: V-cache EPYC 9684X 12 MB (1152 MB for 96 cores; AMD product briefs), Intel Xeon 6980P 3.75 MiB
#: (504 MB for 128 cores, Intel ARK). 16 MiB is above these, so the cap removes what no guest CPU can
#: own (a 480 MiB L3 reported to 2 vCPUs) and bounds probe time; few-core frequency parts (EPYC 9184X,
#: 48 MB per core) exceed it, and a guest on one gets its L3 under-estimated (priced at DRAM speed
#: beyond the cap; calibration fits the DRAM and L3 bandwidths).
GUEST_L3_BYTES_PER_CPU = 16 * 2**20

#: Clock assumed when neither /proc/cpuinfo, cpufreq nor lscpu gives one (Hz): at or below the base
#: clock of current server and desktop cores, so calibration (fp32 peak bounds x0.5..x3) can raise it.
ASSUMED_CLOCK_HZ = 2.0e9

# Roots of the kernel's pseudo file systems and the lscpu command (tests point them elsewhere).
_SYSFS = Path("/sys")
_PROCFS = Path("/proc")
_LSCPU = "lscpu"

_KIB = 2**10
_MIB = 2**20


@dataclass(frozen=True)
class _Microarch:
    name: str
    fma_pipes: int
    datapath_bits: int
    source: str
    fadd_latency: int = 0  # cycles of a dependent SIMD fp add / FMA (0: not in the table)
    fma_latency: int = 0
    latency_source: str = ""


# (vendor_id, cpu family) -> FMA pipes per core and datapath width. Only entries with a citation.
_MICROARCH: dict[tuple[str, int], _Microarch] = {
    ("AuthenticAMD", 0x1A): _Microarch(
        "Zen 5", 2, 512,
        "AMD, Software Optimization Guide for the AMD Zen5 Microarchitecture, pub. 58455 rev. 1.00 (Aug 2024), "
        "floating-point unit: two FMA pipes with a native 512-bit datapath (desktop/server parts)",
    ),
    ("AuthenticAMD", 0x19): _Microarch(
        "Zen 3/Zen 4", 2, 256,
        "AMD, Software Optimization Guide for AMD Family 19h Processors, pub. 56665 rev. 3.00, "
        "floating-point unit: two 256-bit FMA pipes (512-bit AVX-512 ops issue as two 256-bit halves on Zen 4)",
        3, 4,
        "AMD, Software Optimization Guide for AMD Family 19h Processors, pub. 56665 rev. 3.00, floating-point "
        "unit: FADD latency 3 cycles, FMA 4; the FMA figure as AMD disclosed it for Zen 3 (AnandTech, \"AMD Zen 3 "
        "Ryzen Deep Dive Review\", Nov 2020, page 6: 5 cycles on Zen 2, 4 on Zen 3)",
    ),
}

#: Latencies (cycles) of a dependent SIMD fp add and FMA where the microarchitecture is not in the table:
#: Intel's cores from Skylake on and AMD's from Zen 3 on range over 2-4 (add) and 4-5 (FMA); assumed.
ASSUMED_FADD_FMA_LATENCY = (4, 4)


@dataclass(frozen=True)
class HostInfo:
    """What /proc/cpuinfo, lscpu, /sys and /proc/meminfo say about this machine (no timing involved).

    ``fallbacks`` lists, in words, every value that could not be read and what was used instead.
    """

    model_name: str
    vendor_id: str
    family: int
    cores: int
    logical_cpus: int
    clock_hz: float
    clock_source: str
    simd_bits: int
    flags: frozenset[str]
    caches: dict[str, tuple[int, int]]  # level name (l1d, l2, l3) -> (bytes per instance, bytes all instances)
    cache_source: str
    memory_bytes: int
    hostname: str
    cache_sharing: dict[str, int] = field(default_factory=dict)  # level name -> logical CPUs per instance
    online_cpus: int = 0
    hypervisor: str = ""  # hypervisor vendor ("KVM", ...), "" when none was detected
    hypervisor_source: str = ""
    cpuinfo_source: str = "/proc/cpuinfo"
    simd_source: str = "/proc/cpuinfo flags"
    memory_source: str = "/proc/meminfo: MemTotal"
    fallbacks: tuple[str, ...] = ()

    @property
    def microarch(self) -> _Microarch | None:
        return _MICROARCH.get((self.vendor_id, self.family))


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _cpuinfo_blocks() -> list[dict[str, str]]:
    text = _read(_PROCFS / "cpuinfo")
    if not text:
        return []
    blocks = []
    for chunk in text.strip().split("\n\n"):
        d: dict[str, str] = {}
        for line in chunk.splitlines():
            k, sep, v = line.partition(":")
            if sep:
                d[k.strip()] = v.strip()
        if d:
            blocks.append(d)
    return blocks


def _run_lscpu(*args: str) -> str:
    try:
        return subprocess.run([_LSCPU, *args], capture_output=True, text=True, timeout=5, check=True,
                              env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _lscpu_summary() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in _run_lscpu().splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _lscpu_caches() -> dict[str, tuple[int, int]]:
    lines = _run_lscpu("-C", "--bytes").strip().splitlines()
    if not lines:
        return {}
    head = lines[0].split()
    res: dict[str, tuple[int, int]] = {}
    for ln in lines[1:]:
        parts = ln.split()
        row = dict(zip(head, parts, strict=False))
        try:
            one, allsz = int(row["ONE-SIZE"]), int(row["ALL-SIZE"])
        except (KeyError, ValueError):
            continue
        if one > 0 and allsz > 0:
            res[row["NAME"].lower()] = (one, allsz)
    return res


def _cpu_list_count(text: str) -> int:
    """Number of CPUs in a kernel CPU list such as ``0-3,8,10-11``; 0 if it cannot be parsed."""
    n = 0
    for r in text.strip().split(","):
        a, _, b = r.partition("-")
        try:
            n += (int(b) - int(a) + 1) if b else (1 if a.strip() else 0)
        except ValueError:
            return 0
    return n


def _online_cpus() -> tuple[int, str]:
    text = _read(_SYSFS / "devices/system/cpu/online")
    n = _cpu_list_count(text) if text else 0
    if n:
        return n, "/sys/devices/system/cpu/online"
    return (os.cpu_count() or 1), "os.cpu_count()"


def _sys_caches(online: int) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """Cache sizes of cpu0 from /sys, and how many CPUs share each instance; empty if unreadable."""
    base = _SYSFS / "devices/system/cpu/cpu0/cache"
    res: dict[str, tuple[int, int]] = {}
    sharing: dict[str, int] = {}
    try:
        indices = sorted(base.glob("index*"))
    except OSError:
        return {}, {}
    for idx in indices:
        level, typ, size, shared = (_read(idx / f) for f in ("level", "type", "size", "shared_cpu_list"))
        if level is None or typ is None or size is None:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size.strip())
        if not m:
            continue
        one = int(m.group(1)) * {"": 1, "K": _KIB, "M": _MIB, "G": 2**30}[m.group(2)]
        nshare = max(1, _cpu_list_count(shared) if shared else 1)
        typ = typ.strip()
        name = f"l{level.strip()}" + ("d" if typ == "Data" else "i" if typ == "Instruction" else "")
        res[name] = (one, one * max(1, -(-online // nshare)))
        sharing[name] = nshare
    return res, sharing


def _hypervisor(summary: dict[str, str], flags: frozenset[str]) -> tuple[str, str]:
    vendor = summary.get("Hypervisor vendor", "")
    if vendor:
        return vendor, "lscpu: Hypervisor vendor"
    if "hypervisor" in flags:
        return "unknown vendor", "/proc/cpuinfo flags: hypervisor"
    text = (_read(_SYSFS / "hypervisor/type") or "").strip()
    if text:
        return text, "/sys/hypervisor/type"
    return "", "none detected (lscpu Hypervisor vendor, /proc/cpuinfo hypervisor flag, /sys/hypervisor/type)"


def read_host_info() -> HostInfo:
    """Read this machine's CPU description (fast; no probes).

    Never fails for want of /proc, /sys or lscpu: each missing source is replaced by a stated
    fallback, listed in :attr:`HostInfo.fallbacks` (and logged by :func:`detect_host`).
    """
    fallbacks: list[str] = []
    blocks = _cpuinfo_blocks()
    cpuinfo_src = "/proc/cpuinfo"
    if not blocks:
        cpuinfo_src = "platform module (/proc/cpuinfo unreadable)"
        fallbacks.append("/proc/cpuinfo unreadable: model from the platform module, cores from the CPUs this "
                         "process may run on, no vendor/family (generic FMA assumption)")
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    online, _ = _online_cpus()
    first = blocks[0] if blocks else {}

    def _proc_id(b: dict[str, str]) -> int:
        try:
            return int(b.get("processor", "-1"))
        except ValueError:
            return -1

    cores_seen = {(b.get("physical id", "0"), b.get("core id", b.get("processor", "0")))
                  for b in blocks if _proc_id(b) in allowed}
    cores = len(cores_seen) or len(allowed)
    flags = frozenset((first.get("flags") or first.get("Features") or "").split())
    simd_src = "/proc/cpuinfo flags"
    if "avx512f" in flags:
        simd = 512
    elif "avx2" in flags or "avx" in flags:
        simd = 256
    elif flags & {"sse2", "asimd", "neon"}:
        simd = 128
    elif platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64"):
        simd = 128
        simd_src = f"assumed: the {platform.machine()} baseline (SSE2 / Advanced SIMD, 128-bit); no SIMD flags readable"
        fallbacks.append(f"no SIMD flags in /proc/cpuinfo: assumed the {platform.machine()} baseline of 128 bits")
    else:
        simd = 64
        simd_src = f"assumed: scalar 64-bit ({platform.machine() or 'unknown ISA'}, no SIMD flags readable)"
        fallbacks.append("no SIMD flags in /proc/cpuinfo and an unknown ISA: assumed scalar 64-bit arithmetic")
    summary = _lscpu_summary()
    clock = 0.0
    clock_src = ""
    mhz = []
    for b in blocks:
        try:
            mhz.append(float(b["cpu MHz"]))
        except (KeyError, ValueError):
            continue
    if mhz:
        clock, clock_src = mhz[0] * 1e6, "/proc/cpuinfo: cpu MHz (current clock of the first CPU)"
    maxf = _read(_SYSFS / "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if maxf:
        try:
            clock, clock_src = float(maxf.strip()) * 1e3, "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
        except ValueError:
            pass
    if not clock:
        try:
            clock, clock_src = float(summary["CPU max MHz"]) * 1e6, "lscpu: CPU max MHz"
        except (KeyError, ValueError):
            clock = ASSUMED_CLOCK_HZ
            clock_src = (f"assumed: {ASSUMED_CLOCK_HZ / 1e9:g} GHz (no clock in /proc/cpuinfo, cpufreq or lscpu; "
                         "calibration fits the peak rates)")
            fallbacks.append(f"no clock readable (/proc/cpuinfo, /sys cpufreq, lscpu): assumed "
                             f"{ASSUMED_CLOCK_HZ / 1e9:g} GHz")
    caches = _lscpu_caches()
    cache_src = "lscpu -C --bytes"
    sys_caches, sys_sharing = _sys_caches(online)
    sharing: dict[str, int] = {}
    if caches:
        for name, (one, allsz) in caches.items():
            instances = max(1, round(allsz / one))
            sharing[name] = sys_sharing.get(name) or max(1, online // instances)
    elif sys_caches:
        caches, sharing = sys_caches, sys_sharing
        cache_src = "/sys/devices/system/cpu/cpu0/cache"
    else:
        cache_src = "none readable (lscpu -C, /sys/devices/system/cpu/cpu0/cache)"
        fallbacks.append("no cache sizes readable (lscpu -C, /sys/devices/system/cpu/cpu0/cache): the spec has no "
                         "cache levels, every op is priced at the DRAM bandwidth and no cache probe runs")
    mem = 0
    mem_src = "/proc/meminfo: MemTotal"
    for line in (_read(_PROCFS / "meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            try:
                mem = int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                mem = 0
    if not mem:
        try:
            mem = int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            mem_src = "sysconf(SC_PHYS_PAGES x SC_PAGE_SIZE) (/proc/meminfo unreadable)"
            fallbacks.append("/proc/meminfo unreadable: memory size from sysconf(SC_PHYS_PAGES)")
        except (ValueError, OSError, AttributeError):
            mem = 0
            mem_src = "unknown (/proc/meminfo and sysconf unreadable)"
            fallbacks.append("memory size unreadable (/proc/meminfo, sysconf): the DRAM level's capacity is the "
                             "DRAM probe's buffer and the probe uses at most 256 MiB")
    hv, hv_src = _hypervisor(summary, flags)
    try:
        family = int(first.get("cpu family", "0"))
    except ValueError:
        family = 0
    return HostInfo(
        model_name=first.get("model name") or summary.get("Model name") or platform.processor() or "unknown CPU",
        vendor_id=first.get("vendor_id", "unknown"),
        family=family,
        cores=cores,
        logical_cpus=len(allowed),
        clock_hz=clock,
        clock_source=clock_src,
        simd_bits=simd,
        flags=flags,
        caches=caches,
        cache_source=cache_src,
        memory_bytes=mem,
        hostname=socket.gethostname(),
        cache_sharing=sharing,
        online_cpus=online,
        hypervisor=hv,
        hypervisor_source=hv_src,
        cpuinfo_source=cpuinfo_src,
        simd_source=simd_src,
        memory_source=mem_src,
        fallbacks=tuple(fallbacks),
    )


# ------------------------------------------------------------------------------------------------
# probe plan: working-set sizes from the detected hierarchy


@dataclass(frozen=True)
class ProbePlan:
    """Working sets (source + destination bytes) of the copy probes, chosen from the detected hierarchy.

    A size of 0 (an empty ladder) means the level was not detected and is not probed. The L3 is
    probed over a ladder of working sets, doubling from twice the L2 up to ``l3_top_bytes``; where its
    bandwidth falls off (:func:`l3_from_ladder`) is the usable L3.
    """

    l2_bytes: int
    l3_ladder: tuple[int, ...]
    l3_top_bytes: int  # the largest L3 working set considered: the reported instance, or the guest cap
    dram_bytes: int
    l3_rule: str  # how l3_top_bytes was chosen, in words

    @property
    def dram_array_bytes(self) -> int:
        """Bytes of each of the two arrays of the DRAM copy probe."""
        return self.dram_bytes // 2


def _fmt_bytes(n: float) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.3g} GiB"
    return f"{n / _MIB:.3g} MiB" if n >= _MIB else f"{n / _KIB:.3g} KiB"


#: The largest working set of any copy probe (bytes): bounds the L3 ladder and the DRAM arrays.
_PROBE_MAX_BYTES = 256 * _MIB


def probe_plan(info: HostInfo) -> ProbePlan:
    """Probe working sets chosen from ``info``'s cache hierarchy (see the module's rules)."""
    l2_one = info.caches.get("l2", (0, 0))[0]
    l3_one, l3_all = info.caches.get("l3", (0, 0))
    l2_ws = max(32 * _KIB, l2_one // 2) if l2_one else 0
    top, rule, ladder = 0, "no L3 detected", ()
    if l3_one:
        sharing = max(1, info.cache_sharing.get("l3", 1))
        top = l3_one
        rule = f"the reported L3 instance ({_fmt_bytes(l3_one)}, shared by {sharing} CPU(s))"
        if info.hypervisor:
            cap = sharing * GUEST_L3_BYTES_PER_CPU
            if cap < l3_one:
                top = cap
                rule = (f"hypervisor guest ({info.hypervisor}): {sharing} guest CPU(s) x "
                        f"{_fmt_bytes(GUEST_L3_BYTES_PER_CPU)} (GUEST_L3_BYTES_PER_CPU) = {_fmt_bytes(cap)}, "
                        f"less than the {_fmt_bytes(l3_one)} the guest reports for the host's cache")
            else:
                rule += (f"; hypervisor guest ({info.hypervisor}): within {sharing} guest CPU(s) x "
                         f"{_fmt_bytes(GUEST_L3_BYTES_PER_CPU)} (GUEST_L3_BYTES_PER_CPU)")
        if top > _PROBE_MAX_BYTES:
            top = _PROBE_MAX_BYTES
            rule += f"; at most {_fmt_bytes(_PROBE_MAX_BYTES)} (the largest probe)"
        steps: list[int] = []
        w = 2 * l2_one if l2_one else max(64 * _KIB, top // 8)
        while w <= top:
            steps.append(int(w))
            w *= 2
        ladder = tuple(steps) or (max(32 * _KIB, top // 2),)
    mem = info.memory_bytes
    dram_array = int(min(_PROBE_MAX_BYTES, max(4 * l3_all, 64 * _MIB), (mem // 8) if mem else _PROBE_MAX_BYTES))
    return ProbePlan(l2_bytes=int(l2_ws), l3_ladder=ladder, l3_top_bytes=int(top), dram_bytes=2 * dram_array,
                     l3_rule=rule)


@dataclass(frozen=True)
class L3Result:
    """The usable L3 and its bandwidth, read off the L3 ladder of copy bandwidths."""

    usable_bytes: int  # largest working set still copied at L3 speed (one instance)
    probe_bytes: int  # working set whose bandwidth is the L3's
    bandwidth_bytes_per_s: float
    threshold_bytes_per_s: float  # geometric mean of the fastest ladder step and DRAM
    rule: str
    spill_bytes: int = 0  # working set from which no access hits (0: the edge is not measured)
    spill_rule: str = ""


def l3_from_ladder(plan: ProbePlan, values: dict[str, float]) -> L3Result | None:
    """Where the L3 ladder's copy bandwidth falls off, from raw probe values (None without an L3).

    The threshold is the geometric mean of the fastest ladder step and the DRAM probe. Walking up the
    ladder from the first step at or above it, the usable L3 is the last working set before a step
    falls below (the whole ``l3_top_bytes`` when none does: no knee inside the ladder); when no step
    beats DRAM, the L3 is no faster than DRAM for one thread and its size is the first step. The L3's
    bandwidth is the fastest step within half the usable size (or the first step): well inside the
    level, as the other probes.
    """
    if not plan.l3_ladder:
        return None
    bws = [values[f"l3_ladder_{i}"] for i in range(len(plan.l3_ladder))]
    threshold = math.sqrt(max(bws) * values["dram_bw"])
    fast = [i for i, bw in enumerate(bws) if bw >= threshold]  # empty only when no step beats DRAM
    last = -1
    for i in range(fast[0] if fast else len(bws), len(bws)):  # a slow first step (noise) does not end the L3
        if bws[i] < threshold:
            break
        last = i
    ladder = plan.l3_ladder
    if last == len(ladder) - 1:
        usable = plan.l3_top_bytes
        rule = (f"copy bandwidth stays above {threshold / 1e9:.3g} GB/s (geometric mean of the fastest step and "
                f"DRAM) up to the top of the ladder, {_fmt_bytes(plan.l3_top_bytes)}: {plan.l3_rule}")
    elif last >= 0:
        usable = ladder[last]
        rule = (f"measured: copy bandwidth falls below {threshold / 1e9:.3g} GB/s (geometric mean of the fastest "
                f"step and DRAM) beyond a {_fmt_bytes(usable)} working set "
                f"({bws[last + 1] / 1e9:.3g} GB/s at {_fmt_bytes(ladder[last + 1])})")
    else:
        usable = ladder[0]
        rule = (f"measured: no L3 working set copies faster than DRAM ({values['dram_bw'] / 1e9:.3g} GB/s) for one "
                "thread; its size is the first step")
    inside = [i for i, w in enumerate(ladder) if w <= max(usable // 2, ladder[0])]
    j = max(inside, key=lambda i: bws[i])
    spill, spill_rule = 0, ""
    if 0 <= last < len(ladder) - 1:
        # the share of the bytes the L3 still serves one step past the knee, from the time per byte
        # (1/bw = share/bw_l3 + (1 - share)/bw_dram), extended linearly in log size to where it is 0
        past, bw_past = ladder[last + 1], bws[last + 1]
        inv_l3, inv_dram = 1.0 / bws[j], 1.0 / values["dram_bw"]
        share = (1.0 / bw_past - inv_dram) / (inv_l3 - inv_dram) if inv_dram > inv_l3 else 0.0
        share = min(max(share, 0.0), 0.9)  # below the threshold: at most ~0.65 unless the probes are noisy
        spill = int(usable * (past / usable) ** (1.0 / (1.0 - share)))
        spill_rule = (f"measured: at {_fmt_bytes(past)} the copy bandwidth ({bw_past / 1e9:.3g} GB/s) is that of "
                      f"{100 * share:.0f}% of the bytes from the L3 ({bws[j] / 1e9:.3g} GB/s) and the rest from DRAM "
                      f"({values['dram_bw'] / 1e9:.3g} GB/s); the share, 100% at the usable {_fmt_bytes(usable)}, "
                      f"falls linearly in log size to 0 at {_fmt_bytes(spill)}")
    return L3Result(int(usable), int(ladder[j]), float(bws[j]), float(threshold), rule, spill, spill_rule)


# ------------------------------------------------------------------------------------------------
# probes (NumPy; a few seconds in all, cached per machine)


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


#: Distance (bytes, modulo :data:`ALIAS_PERIOD`) between the source and destination of a probe's copy.
PAIR_SKEW = 2048
#: Address bits the load/store units compare before the full address is known (4 KiB: the page offset).
ALIAS_PERIOD = 4096


def skewed_pair(n: int, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Two ``n``-element arrays, the second starting :data:`PAIR_SKEW` bytes past a page boundary
    relative to the first: ``(b - a) % 4096 == 2048``.

    A streaming loop whose destination sits a few bytes after its source modulo 4 KiB makes every load
    look as if it depended on a store in flight ("4K aliasing": the load/store unit compares the page
    offset, bits 11-0, first; Intel 64 and IA-32 Architectures Optimization Reference Manual, "4-KByte
    aliasing"). Two equal arrays that ``malloc`` places back to back are 16 bytes apart modulo 4 KiB
    when their size is a multiple of a page. Measured on a 2-core AMD EPYC (Zen 3) KVM guest: a copy of
    32-256 KiB arrays ran at 3.5-4 GB/s with the destination 16 bytes past the source modulo 4 KiB and at
    34-65 GB/s with it 0, 64, 256, 1024, 2048, 3072 or 4032 bytes past, so an L2 probe measured the
    allocator, not the cache. Half a page apart keeps the two streams' offsets as far from each other as
    they can be.
    """
    itemsize = np.dtype(dtype).itemsize
    nbytes = n * itemsize
    span = -(-(nbytes + PAIR_SKEW) // ALIAS_PERIOD) * ALIAS_PERIOD
    raw = np.empty(2 * span + ALIAS_PERIOD, dtype=np.uint8)
    start = -raw.ctypes.data % ALIAS_PERIOD
    a = raw[start:start + nbytes].view(dtype)
    b = raw[start + span + PAIR_SKEW:start + span + PAIR_SKEW + nbytes].view(dtype)
    return a, b


def _copy_bandwidth(nbytes: int, repeats: int) -> float:
    """Bytes moved (read + write) per second by np.copyto over a buffer of ``nbytes`` (source and
    destination half a page apart: :func:`skewed_pair`)."""
    n = max(1, nbytes // 8)
    src, dst = skewed_pair(n)
    src.fill(1.0)
    np.copyto(dst, src)
    t = _best_time(lambda: np.copyto(dst, src), repeats)
    return 2 * n * 8 / t


def _chase_latency(nbytes: int, steps: int, seed: int = 0) -> float:
    """Dependent-load latency over ``nbytes`` minus the same chase over a 4 KiB (L1-resident) buffer.

    A random cyclic permutation is followed ``steps`` times (each load's address depends on the
    previous one); subtracting the per-step time over the small buffer removes the interpreter's own
    cost, leaving the extra load-to-use time of the larger level (TLB misses included).
    """
    rng = np.random.default_rng(seed)

    def chase(n: int) -> float:
        perm = rng.permutation(n)
        nxt = np.empty(n, dtype=np.int64)
        nxt[perm] = np.roll(perm, -1)

        def run() -> None:
            i = 0
            for _ in range(steps):
                i = nxt[i]

        return _best_time(run, 2) / steps

    base = [chase(512) for _ in range(3)]
    resolution = max(base) - min(base)
    extra = chase(max(512, nbytes // 8)) - min(base)
    # below the run-to-run spread of the baseline the difference is not resolved: report that bound
    return max(extra, resolution, 1e-10)


#: Special functions timed by the probe: name -> NumPy ufunc name.
_SPECIAL_FUNCTIONS = {"exp": "exp", "tanh": "tanh"}


def _special_function_probe(n: int = 1 << 16, repeats: int = 50) -> dict[str, float]:
    """Seconds per element of NumPy's fp32 exp and tanh over an L2-resident buffer, minus a plain add.

    The add over the same buffers is the loads, stores and loop; what remains is the evaluation of the
    function itself (vectorised by NumPy's SIMD dispatch). Keys ``sf_<name>``.
    """
    x, out = skewed_pair(n, np.float32)
    x[:] = np.linspace(-4.0, 4.0, n, dtype=np.float32)
    base = _best_time(lambda: np.add(x, x, out=out), repeats)
    res: dict[str, float] = {}
    for name, ufunc in _SPECIAL_FUNCTIONS.items():
        fn = getattr(np, ufunc)
        t = _best_time(lambda fn=fn: fn(x, out=out), repeats)
        # below the add's own time the difference is not resolved: keep the whole evaluation (an upper bound)
        res[f"sf_{name}"] = (t - base if t > base else t) / n
    return res


def _strided_copy_probe(channels: int = 64, width: int = 4, repeats: int = 30) -> float:
    """Seconds per contiguous run when copying a 3x3 sliding-window view (im2col) of a small image.

    The unfold of a ``channels x width x width`` input (padded by one) into ``channels*9`` rows of
    ``width x width`` values is copied in runs of ``width`` contiguous elements; with short runs the
    time is almost all per-run loop overhead, which is what an im2col pays per output row.
    """
    from numpy.lib.stride_tricks import sliding_window_view

    img = np.ones((channels, width + 2, width + 2), dtype=np.float32)
    view = sliding_window_view(img, (3, 3), axis=(1, 2)).transpose(0, 3, 4, 1, 2)
    dst = np.empty(view.shape, dtype=np.float32)
    t = _best_time(lambda: np.copyto(dst, view), repeats)
    return t / (channels * 9 * width)


#: Repetitions (best of) of each copy probe and steps of each pointer chase.
_COPY_REPEATS = {"dram": 3, "l3": 10, "l2": 30}
_CHASE_STEPS = 100_000


@functools.lru_cache(maxsize=4)
def _run_probes(plan: ProbePlan) -> dict[str, float]:
    """Time the probes of ``plan`` (raw values, before :func:`clamp_levels`); memoised per process.

    Keys: ``dram_bw``, ``l3_ladder_<i>`` (one per ladder step), ``l2_bw`` (B/s); ``dram_lat``,
    ``l3_lat`` (over the L3 probe's working set of :func:`l3_from_ladder`), ``l2_lat``, ``sf_<name>``,
    ``strided_run``, ``call_overhead`` (s); ``dram_buf`` (B).
    """
    out: dict[str, float] = {}
    out["dram_bw"] = _copy_bandwidth(plan.dram_array_bytes, _COPY_REPEATS["dram"])
    for i, ws in enumerate(plan.l3_ladder):
        out[f"l3_ladder_{i}"] = _copy_bandwidth(ws // 2, _COPY_REPEATS["l3"])
    if plan.l2_bytes:
        out["l2_bw"] = _copy_bandwidth(plan.l2_bytes // 2, _COPY_REPEATS["l2"])
    out["dram_buf"] = float(plan.dram_array_bytes)
    out["dram_lat"] = _chase_latency(plan.dram_array_bytes, _CHASE_STEPS)
    l3 = l3_from_ladder(plan, out)
    if l3 is not None:
        out["l3_lat"] = _chase_latency(l3.probe_bytes, _CHASE_STEPS)
    if plan.l2_bytes:
        out["l2_lat"] = _chase_latency(plan.l2_bytes, _CHASE_STEPS)
    out.update(_special_function_probe())
    out["strided_run"] = _strided_copy_probe()
    tiny_a = np.ones(1, dtype=np.float32)
    tiny_b = np.ones(1, dtype=np.float32)
    out["call_overhead"] = _best_time(lambda: [np.add(tiny_a, tiny_b) for _ in range(1000)], 5) / 1000
    return out


def _expected_keys(plan: ProbePlan) -> set[str]:
    keys = {"dram_bw", "dram_buf", "dram_lat", "strided_run", "call_overhead"}
    keys |= {f"sf_{name}" for name in _SPECIAL_FUNCTIONS}
    keys |= {f"l3_ladder_{i}" for i in range(len(plan.l3_ladder))}
    if plan.l3_ladder:
        keys.add("l3_lat")
    if plan.l2_bytes:
        keys |= {"l2_bw", "l2_lat"}
    return keys


# ------------------------------------------------------------------------------------------------
# the per-machine probe cache


_FALSE_WORDS = ("", "0", "false", "no", "off")


def probe_cache_dir() -> Path | None:
    """Folder of the probe cache: ``$NODEPERF_CACHE_DIR``, else ``$XDG_CACHE_HOME/nodeperf``, else
    ``~/.cache/nodeperf``; None when ``NODEPERF_NO_CACHE`` is set (to anything but 0/false/no/off)
    or no home folder is known."""
    if os.environ.get("NODEPERF_NO_CACHE", "").strip().lower() not in _FALSE_WORDS:
        return None
    override = os.environ.get("NODEPERF_CACHE_DIR", "").strip()
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative value is invalid and ignored
        return Path(xdg) / "nodeperf"
    try:
        return Path.home() / ".cache" / "nodeperf"
    except (RuntimeError, KeyError):
        return None


def _cache_key_fields(info: HostInfo, plan: ProbePlan) -> dict[str, Any]:
    return {
        "probe_version": PROBE_VERSION,
        "model_name": info.model_name,
        "vendor_id": info.vendor_id,
        "family": info.family,
        "cores": info.cores,
        "logical_cpus": info.logical_cpus,
        "caches": {k: list(v) for k, v in sorted(info.caches.items())},
        "memory_bytes": info.memory_bytes,
        "hypervisor": info.hypervisor,
        "plan": dataclasses.asdict(plan),
    }


def _cache_key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


_CACHE_SCHEMA = "nodeperf.host-probe/1"
#: Cache files written by this process -> the status they were written with.
_WRITTEN_HERE: dict[str, str] = {}


@dataclass(frozen=True)
class HostProbes:
    """Raw probe results of this machine and where they came from (timed now, or the cache file)."""

    values: dict[str, float]
    plan: ProbePlan
    cache_status: str  # "hit", "miss", "corrupt", "disabled" or "unwritable", then what happened
    cache_file: str  # "" when caching is disabled
    measured_at: str  # ISO date of the timing (UTC)
    load_average: float | None  # 1-minute load average when timed (None where unreadable)


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _read_cache(path: Path, key: str, plan: ProbePlan) -> tuple[dict[str, Any] | None, str]:
    """(cached record, "") on a hit; (None, why) otherwise: "" for a plain miss, else the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({exc.__class__.__name__}: {exc})"
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(rec, dict) or rec.get("schema") != _CACHE_SCHEMA:
        return None, f"schema; expected {_CACHE_SCHEMA!r}"
    if rec.get("key") != key:
        return None, "key does not match the file name's machine"
    vals = rec.get("values")
    if not isinstance(vals, dict):
        return None, "no 'values' table"
    missing = sorted(_expected_keys(plan) - set(vals))
    if missing:
        return None, f"missing values {', '.join(missing)}"
    bad = sorted(k for k, v in vals.items()
                 if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0)
    if bad:
        return None, f"values not positive finite numbers: {', '.join(bad)}"
    return rec, ""


def _write_cache(path: Path, rec: dict[str, Any]) -> str:
    """Write ``rec`` atomically; "" on success, else the reason."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return f"{exc.__class__.__name__}: {exc}"
    return ""


def probe_host(info: HostInfo | None = None, *, use_cache: bool = True) -> HostProbes:
    """This machine's raw probe results, from the per-machine cache or timed now (and cached).

    The cache file is ``<probe_cache_dir()>/host-probe-<key[:16]>.json``; the key hashes the CPU model,
    vendor and family, core counts, cache sizes, memory size, hypervisor, the probe plan and
    :data:`PROBE_VERSION`, so a different machine or probe code never reads another's values. A file
    that cannot be used (not JSON, wrong schema or key, missing or non-positive values) is ignored
    with a warning and rewritten; a folder that cannot be written is warned about once per call and the
    fresh values are used. ``use_cache=False`` (or ``NODEPERF_NO_CACHE=1``) always times the probes.

    Other processes slow the probes down. A probe timed while the 1-minute load average was at least
    the number of online CPUs is warned about, and its cached values are replaced by the first later
    run that finds the machine below that load ("stale" status); a quiet probe is kept.
    """
    info = info or read_host_info()
    plan = probe_plan(info)
    busy_at = max(1, info.online_cpus or info.logical_cpus)
    load = _load_average()
    folder = probe_cache_dir() if use_cache else None
    if folder is None:
        _warn_if_busy(load, busy_at)
        return HostProbes(dict(_run_probes(plan)), plan, "disabled", "", _now(), load)
    fields = _cache_key_fields(info, plan)
    key = _cache_key(fields)
    path = folder / f"host-probe-{key[:16]}.json"
    rec, problem = _read_cache(path, key, plan)
    status = "miss"
    if rec is not None:
        then = rec.get("load_average")
        then = float(then) if isinstance(then, int | float) and not isinstance(then, bool) else None
        if then is None or then < busy_at or load is None or load >= busy_at:
            # a file this process wrote reports how it came to be (e.g. `hardware show host` after --hardware host)
            hit = _WRITTEN_HERE.get(str(path), "hit")
            return HostProbes({k: float(v) for k, v in rec["values"].items()}, plan, hit, str(path),
                              str(rec.get("measured_at", "")), then)
        status = f"stale (timed at load {then:g} on {busy_at} CPUs, now {load:g})"
        logger.info("host probe cache %s: %s; probing again", path, status)
    elif problem:
        logger.warning("host probe cache %s: %s; ignored, probing again and rewriting it", path, problem)
        status = f"corrupt ({problem})"
    _warn_if_busy(load, busy_at)
    vals = dict(_run_probes(plan))
    now = _now()
    err = _write_cache(path, {"schema": _CACHE_SCHEMA, "key": key, "key_fields": fields, "measured_at": now,
                              "load_average": load, "values": vals})
    if err:
        logger.warning("host probe cache %s: cannot write (%s); the probes will run again next time", path, err)
        status += f"; not written ({err})"
    else:
        status += "; written"
        _WRITTEN_HERE[str(path)] = status + " earlier in this process"
    return HostProbes(vals, plan, status, str(path), now, load)


def _warn_if_busy(load: float | None, busy_at: int) -> None:
    if load is not None and load >= busy_at:
        logger.warning("host probes timed on a busy machine (1-minute load average %g on %d CPUs): bandwidths and "
                       "per-call times may be off; a later run on a quieter machine replaces the cached values",
                       load, busy_at)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


# ------------------------------------------------------------------------------------------------
# consistency of the probed levels


def clamp_levels(levels: list[tuple[str, float, float]]) -> tuple[list[tuple[str, float, float]], dict[str, str]]:
    """Make probed memory levels consistent: no cache level slower than the level behind it.

    ``levels`` are ``(name, bandwidth B/s, latency s)``, outermost (DRAM) first. Walking inwards, a
    level whose bandwidth is lower than the (already consistent) level behind it gets that level's
    bandwidth, and one whose latency is higher gets that level's latency. Returns the consistent
    levels and, for each clamped field's dotted path (``memory.l3.read_bandwidth_bytes_per_s``,
    ``memory.l3.latency_s``), a note ``"clamped: probe gave X < dram Y"``.
    """
    out: list[tuple[str, float, float]] = []
    notes: dict[str, str] = {}
    for name, bw, lat in levels:
        if out:
            outer, obw, olat = out[-1]
            if bw < obw:
                notes[f"memory.{name}.read_bandwidth_bytes_per_s"] = (
                    f"clamped: probe gave {bw / 1e9:.3g} GB/s < {outer} {obw / 1e9:.3g} GB/s")
                bw = obw
            if lat > olat:
                notes[f"memory.{name}.latency_s"] = f"clamped: probe gave {lat * 1e9:.3g} ns > {outer} {olat * 1e9:.3g} ns"
                lat = olat
        out.append((name, bw, lat))
    return out, notes


_BW_NOTE = "np.copyto, best of repeats, read + write bytes counted; one thread"
_LAT_NOTE = ("dependent random loads, minus the same chase over a 4 KiB buffer (interpreter cost); "
             "a value at the baseline's run-to-run spread is an upper bound, not resolved")
_PROBE = "measured: host probe"


def _memory_levels(info: HostInfo, probes: HostProbes, prov: dict[str, Provenance]) -> tuple[list[MemoryLevel],
                                                                                              dict[str, float]]:
    """Memory levels (outermost first) of a run on ``info.cores`` cores from the probes, clamped; fills ``prov``."""
    pr = probes.values
    plan = probes.plan
    dram_cap = float(info.memory_bytes) or float(plan.dram_array_bytes)
    rows: list[tuple[str, float, float]] = [("dram", pr["dram_bw"], pr["dram_lat"])]
    caps: dict[str, tuple[float, str]] = {}
    spills: dict[str, tuple[float, str]] = {}
    l3_one, l3_all = info.caches.get("l3", (0, 0))
    l3 = l3_from_ladder(plan, pr)
    if l3_one and l3 is not None:
        sharing = max(1, info.cache_sharing.get("l3", 1))
        spanned = -(-info.cores // sharing)  # instances the run's cores touch, filled in order
        cap = float(min(l3_all, l3.usable_bytes * spanned))
        caps["l3"] = (cap, f"{_fmt_bytes(l3_one)} per instance, {_fmt_bytes(l3_all)} in all; usable per instance "
                           f"{_fmt_bytes(l3.usable_bytes)}: {l3.rule}; {spanned} instance(s) for the {info.cores} "
                           "core(s) used")
        if l3.spill_bytes > l3.usable_bytes:  # a soft edge, measured on the ladder
            spill = float(min(l3_all, l3.spill_bytes * spanned))
            spills["l3"] = (spill, f"{l3.spill_rule}; {spanned} instance(s), at most the {_fmt_bytes(l3_all)} "
                                   "reported in all")
        rows.append(("l3", l3.bandwidth_bytes_per_s, pr["l3_lat"]))
    l2_one, l2_all = info.caches.get("l2", (0, 0))
    if l2_one and plan.l2_bytes:
        # the L2 is private to a core: a run on `cores` cores holds `cores` instances of it
        cap = float(min(l2_all, l2_one * info.cores))
        caps["l2"] = (cap, f"{_fmt_bytes(l2_one)} per instance; one private instance per core used ({info.cores})")
        rows.append(("l2", pr["l2_bw"], pr["l2_lat"]))
    consistent, clamps = clamp_levels(rows)
    for path, note in clamps.items():
        logger.warning("host: %s: %s (a cache level cannot be slower than the level behind it)", path, note)
    dram_ws = f"a {_fmt_bytes(plan.dram_array_bytes)} array into another ({_fmt_bytes(plan.dram_bytes)} working set)"
    l3_ws = l3.probe_bytes if l3 is not None else 0
    ladder = ", ".join(_fmt_bytes(w) for w in plan.l3_ladder)
    ws = {"dram": dram_ws,
          "l3": f"{_fmt_bytes(l3_ws)} working set (source + destination), the fastest step within half the usable "
                f"L3 of the ladder {ladder}",
          "l2": f"{_fmt_bytes(plan.l2_bytes)} working set (source + destination, cache-resident)"}
    chase = {"dram": _fmt_bytes(plan.dram_array_bytes), "l3": _fmt_bytes(l3_ws), "l2": _fmt_bytes(plan.l2_bytes)}
    levels: list[MemoryLevel] = []
    energy = Provenance("not modelled: no energy counter is readable on this host")
    for name, bw, lat in consistent:
        if name == "dram":
            cap = dram_cap
            prov["memory.dram.capacity_bytes"] = Provenance(
                info.memory_source if info.memory_bytes else
                f"{_PROBE}: the DRAM probe's array (memory size unreadable)")
        else:
            cap, cap_note = caps[name]
            prov[f"memory.{name}.capacity_bytes"] = Provenance(
                f"{info.cache_source}: {name.upper()} ONE-SIZE/ALL-SIZE", cap_note)
        spill, spill_note = spills.get(name, (0.0, ""))
        if spill:
            prov[f"memory.{name}.spill_bytes"] = Provenance(f"{_PROBE}: the L3 ladder", spill_note)
        levels.append(MemoryLevel(name, cap, bw, bw, lat, 0.0, spill))
        bw_path, lat_path = f"memory.{name}.read_bandwidth_bytes_per_s", f"memory.{name}.latency_s"
        bw_src = f"{_PROBE}: copy of {ws[name]}" + (f"; {clamps[bw_path]}" if bw_path in clamps else "")
        prov[bw_path] = Provenance(bw_src, _BW_NOTE)
        prov[f"memory.{name}.write_bandwidth_bytes_per_s"] = prov[bw_path]
        lat_src = f"{_PROBE}: pointer chase over {chase[name]}" + (f"; {clamps[lat_path]}" if lat_path in clamps else "")
        prov[lat_path] = Provenance(lat_src, _LAT_NOTE)
        prov[f"memory.{name}.energy_j_per_byte"] = energy
    return levels, pr


_NOMINAL = "nominal: 1 (no derating) before calibration; `nodeperf calibrate` fits it to measurements"


def detect_host(info: HostInfo | None = None, *, cores: int | None = None) -> DeviceSpec:
    """The host CPU as a :class:`DeviceSpec` of kind ``"cpu"`` named :data:`HOST_NAME`.

    ``cores`` limits the compute to that many cores (a run with ``--threads N``); default all usable.

    Reads /proc/cpuinfo, lscpu, /sys and /proc/meminfo, then runs short NumPy probes (copy bandwidth
    per memory level, dependent-load latency, per-call overhead; a few seconds) sized by
    :func:`probe_plan`, or reads them from the per-machine cache (:func:`probe_host`). Probed levels are
    made consistent by :func:`clamp_levels`; every fallback and clamp is logged as a warning and named
    in the provenance.
    """
    info = info or read_host_info()
    if cores is not None and not 1 <= cores <= info.cores:
        raise ValueError(f"host: cores; got {cores}; expected 1..{info.cores} (cores this process may use)")
    for msg in info.fallbacks:
        logger.warning("host: %s", msg)
    probes = probe_host(info)  # of the whole machine: host and host:N share one cache entry
    if cores is not None:
        info = dataclasses.replace(info, cores=cores)
    prov: dict[str, Provenance] = {}
    ua = info.microarch
    rates, width = _compute_rates(info, cores, prov)
    clock = info.clock_hz

    levels, pr = _memory_levels(info, probes, prov)

    overhead = pr["call_overhead"]
    eff = _host_efficiency(pr, overhead, prov)
    cpu = _host_cpu_spec(info, pr, width, overhead, prov)
    na = "not available: no power sensor (RAPL) is readable on this host; the host's energy is not modelled"
    prov["power.tdp_w"] = Provenance(na)
    prov["power.idle_w"] = Provenance(na)
    desc = (f"{info.model_name} ({info.cores} cores used, {info.simd_bits}-bit SIMD"
            f"{', ' + ua.name if ua else ''}) on {info.hostname}")
    return DeviceSpec(
        name=HOST_NAME,
        kind="cpu",
        vendor=info.vendor_id,
        arch=(ua.name.lower().replace(" ", "").replace("/", "-") if ua else f"{info.vendor_id.lower()}-fam{info.family:x}"),
        description=desc,
        clock=ClockSpec(boost_hz=clock, sustained_hz=clock),
        compute=ComputeSpec(units=info.cores, tensor_flops_per_s=dict(rates), vector_flops_per_s=dict(rates)),
        memory=tuple(levels),
        power=PowerSpec(tdp_w=0.0, idle_w=0.0),
        energy=EnergySpec(tensor_j_per_flop={}, vector_j_per_flop={}),
        efficiency=eff,
        provenance=dict(sorted(prov.items())),
        source_file="<host>",
        cpu=cpu,
    )


def _compute_rates(info: HostInfo, cores: int | None, prov: dict[str, Provenance]) -> tuple[dict[str, float], int]:
    """Peak FLOP/s per dtype and the SIMD datapath width in bits; records compute and clock provenance."""
    ua = info.microarch
    if ua is not None:
        pipes = ua.fma_pipes
        width = min(ua.datapath_bits, info.simd_bits)
        ua_src = ua.source
    else:
        pipes, width = 1, info.simd_bits
        ua_src = (f"assumed: one FMA pipe per core, {info.simd_bits}-bit wide (microarchitecture of "
                  f"{info.vendor_id} family {info.family:#x} not in hwmodels/host.py's table); "
                  "efficiency.tensor_peak_fraction absorbs the difference after calibration")
    fma = "fma" in info.flags or "asimd" in info.flags
    flop_per_lane = 2 if fma else 1
    per_cycle_fp32 = pipes * (width // 32) * flop_per_lane
    clock = info.clock_hz
    peak32 = info.cores * clock * per_cycle_fp32
    rates = {"fp64": peak32 / 2, "fp32": peak32}
    bf16_factor = 2 if "avx512_bf16" in info.flags or "amx_bf16" in info.flags else 1
    fp16_factor = 2 if "avx512_fp16" in info.flags else 1
    rates["bf16"] = peak32 * bf16_factor
    rates["fp16"] = peak32 * fp16_factor
    derive = (f"derived: {info.cores} cores x {clock / 1e9:.4g} GHz x {pipes} FMA pipes x {width // 32} fp32 lanes "
              f"x {flop_per_lane} FLOP/FMA; SIMD width from {info.simd_source} ({info.simd_bits}-bit); pipes and datapath: {ua_src}")
    for grp in ("tensor_flops_per_s", "vector_flops_per_s"):
        prov[f"compute.{grp}.fp32"] = Provenance(derive)
        prov[f"compute.{grp}.fp64"] = Provenance(derive, "half the fp32 lanes")
        prov[f"compute.{grp}.bf16"] = Provenance(
            derive, "x2: avx512_bf16 dot-product instructions in /proc/cpuinfo flags" if bf16_factor == 2
            else "same as fp32: no bf16 arithmetic flag in /proc/cpuinfo (converted to fp32)")
        prov[f"compute.{grp}.fp16"] = Provenance(
            derive, "x2: avx512_fp16 in /proc/cpuinfo flags" if fp16_factor == 2
            else "same as fp32: no fp16 arithmetic flag in /proc/cpuinfo (converted to fp32)")
    prov["compute.units"] = Provenance(f"{info.cpuinfo_source}: distinct (physical id, core id) among the {info.logical_cpus} "
                                       "CPUs this process may run on" + (f"; limited to {cores} by the caller" if cores else ""))
    prov["clock.boost_hz"] = Provenance(info.clock_source)
    prov["clock.sustained_hz"] = Provenance(info.clock_source, "no separate sustained clock is readable")
    return rates, width


def _host_efficiency(pr: dict[str, float], overhead: float, prov: dict[str, Provenance]) -> EfficiencySpec:
    """The host's nominal efficiency with probed overheads; records the efficiency provenance."""
    eff = EfficiencySpec(
        tensor_peak_fraction=1.0,
        vector_peak_fraction=1.0,
        dram_bandwidth_fraction=1.0,
        l2_bandwidth_fraction=1.0,
        bandwidth_half_size_bytes=max(1.0, pr["dram_bw"] * overhead),
        launch_overhead_s=overhead,
        graph_launch_overhead_s=overhead,
    )
    prov["efficiency.tensor_peak_fraction"] = Provenance(_NOMINAL)
    prov["efficiency.vector_peak_fraction"] = Provenance(_NOMINAL)
    prov["efficiency.dram_bandwidth_fraction"] = Provenance(_NOMINAL, "the DRAM bandwidth is itself a probe of a copy")
    prov["efficiency.l2_bandwidth_fraction"] = Provenance(_NOMINAL, "applies to the cache levels (l2, l3) on a CPU")
    prov["efficiency.launch_overhead_s"] = Provenance(f"{_PROBE}: NumPy add of two 1-element arrays, per call",
                                                      "the framework's per-op dispatch cost")
    prov["efficiency.graph_launch_overhead_s"] = Provenance(f"{_PROBE}: as launch_overhead_s",
                                                            "a CPU has no graph launch; equal to launch_overhead_s")
    prov["efficiency.bandwidth_half_size_bytes"] = Provenance(
        "derived: dram bandwidth x per-call overhead (the size at which a copy reaches half its asymptotic bandwidth)")
    prov["energy.dram_path_j_per_byte"] = Provenance("not modelled: no energy counter is readable on this host (0)")
    for fld in ("weight_dequant_ops_per_element", "linalg_block_size", "linalg_sweep_row_s", "simt_gemm_peak_fraction",
                "decode_attention_bandwidth_fraction", "decode_attention_fp8_bandwidth_fraction", "fp8_promotion_interval",
                "context_fmha_tensor_fraction"):
        # spec.py's cited defaults (0: dequantisation not modelled on a CPU, no separate SGEMM or decode-attention
        # figure; LAPACK's ILAENV block size; a measured dsterf sweep rate), which `nodeperf calibrate` may refit
        prov[f"efficiency.{fld}"] = Provenance(f"default of EfficiencySpec.{fld} (see hwmodels/spec.py)")
    return eff


def _host_cpu_spec(info: HostInfo, pr: dict[str, float], width: int, overhead: float,
                   prov: dict[str, Provenance]) -> CpuSpec:
    """The host's CPU-specific model terms (reference GEMM, row moments, probes); records their provenance."""
    lanes = max(1, width // 32)
    reference = _reference_gemm(info, prov)
    row_moments = _row_moments(info, prov)
    cpu = CpuSpec(
        row_moments_s=row_moments,
        reference_gemm_flops_per_s=reference,
        gemm_peak_fraction=1.0,
        dnn_peak_fraction=1.0,
        gemm_half_m=float(lanes),
        gemm_half_n=float(lanes),
        gemm_half_k=float(lanes),
        special_function_s={name: pr[f"sf_{name}"] / info.cores for name in _SPECIAL_FUNCTIONS},
        strided_copy_run_s=pr["strided_run"] / info.cores,
        library_call_overhead_s=overhead,
    )
    prov["cpu.gemm_peak_fraction"] = Provenance(_NOMINAL, "the BLAS library's GEMM (fp32 matmul, im2col convolutions)")
    prov["cpu.dnn_peak_fraction"] = Provenance(_NOMINAL, "the primitive library (oneDNN): direct convolutions, bf16/fp16 GEMMs")
    half = (f"derived: fp32 lanes of one {width}-bit SIMD register ({lanes}), the granularity at which a "
            "vectorised micro-kernel pads a matrix side; `nodeperf calibrate` fits it")
    for side in ("m", "n", "k"):
        prov[f"cpu.gemm_half_{side}"] = Provenance(half)
    for name in _SPECIAL_FUNCTIONS:
        prov[f"cpu.special_function_s.{name}"] = Provenance(
            f"{_PROBE}: NumPy fp32 {name} over a 256 KiB buffer minus an add over the same buffers, per element",
            f"one core; divided by the {info.cores} core(s) used")
    prov["cpu.strided_copy_run_s"] = Provenance(
        f"{_PROBE}: NumPy copy of a 3x3 sliding-window view (im2col) of a 64x6x6 fp32 image, per 4-element run",
        f"one core; divided by the {info.cores} core(s) used")
    prov["cpu.library_call_overhead_s"] = Provenance(
        f"{_PROBE}: as efficiency.launch_overhead_s (one more call per op) before calibration",
        "primitive lookup/creation of oneDNN calls; `nodeperf calibrate` fits it")
    return cpu


def _reference_gemm(info: HostInfo, prov: dict[str, Provenance]) -> dict[str, float]:
    """One-thread reference GEMM rate per low-precision dtype with no optimised library; records provenance."""
    clock = info.clock_hz
    reference: dict[str, float] = {}
    for dt in ("bf16", "fp16"):
        library, why = low_precision_library(info, dt)
        if not library:
            reference[dt] = clock * REFERENCE_GEMM_FLOP_PER_CYCLE
            prov[f"cpu.reference_gemm_flops_per_s.{dt}"] = Provenance(
                f"derived: {clock / 1e9:.4g} GHz x {REFERENCE_GEMM_FLOP_PER_CYCLE:g} FLOP/cycle "
                "(hwmodels.host.REFERENCE_GEMM_FLOP_PER_CYCLE, measured by benchmarks/bench_reference_gemm.py), one thread",
                why)
    return reference


def _row_moments(info: HostInfo, prov: dict[str, Provenance]) -> float:
    """Seconds per row element of PyTorch's row moments over all cores; records its provenance."""
    ua = info.microarch
    clock = info.clock_hz
    # PyTorch's row moments: one subtract + one FMA per SIMD vector of the row (lanes fp32 elements of the
    # widest vector ATen's CPU capability uses) on a loop-carried chain, rows spread over the cores
    if ua is not None and ua.fadd_latency and ua.fma_latency:
        add_lat, fma_lat, lat_src = ua.fadd_latency, ua.fma_latency, ua.latency_source
    else:
        add_lat, fma_lat = ASSUMED_FADD_FMA_LATENCY
        lat_src = (f"assumed: {add_lat} + {fma_lat} cycles (hwmodels.host.ASSUMED_FADD_FMA_LATENCY; the "
                   f"microarchitecture of {info.vendor_id} family {info.family:#x} is not in hwmodels/host.py's table)")
    simd_lanes = max(1, info.simd_bits // 32)
    row_moments = (add_lat + fma_lat) / simd_lanes / clock / info.cores
    prov["cpu.row_moments_s"] = Provenance(
        f"derived: ({add_lat} + {fma_lat}) cycles per {simd_lanes}-lane fp32 vector / {clock / 1e9:.4g} GHz / "
        f"{info.cores} core(s); latencies: {lat_src}",
        "PyTorch's RowwiseMoments (aten/src/ATen/native/cpu/moments_utils.h): the Welford update's subtract and "
        "FMA on one chain per vector")
    return row_moments


@functools.lru_cache(maxsize=8)
def host_spec(cores: int | None = None) -> DeviceSpec:
    """:func:`detect_host` once per process and core count (the probes are not repeated)."""
    return detect_host(cores=cores)


# ------------------------------------------------------------------------------------------------
# what was detected and probed, for `nodeperf hardware show host`


def host_report(cores: int | None = None) -> dict[str, Any]:
    """What was detected (with the source of each value), how each probe was sized and run, its raw
    result, whether it was clamped, and where the probe results came from (cache file or timed now).

    JSON-ready; :func:`describe_host` prints it. Uses the per-machine probe cache like ``--hardware host``.
    """
    info = read_host_info()
    probes = probe_host(info)
    spec = host_spec(cores)
    plan = probes.plan
    pr = probes.values
    ua = info.microarch
    detected: dict[str, dict[str, Any]] = {
        "model": {"value": info.model_name, "source": info.cpuinfo_source + ": model name"},
        "vendor": {"value": info.vendor_id, "source": info.cpuinfo_source + ": vendor_id"},
        "family": {"value": f"{info.family:#x}" + (f" ({ua.name})" if ua else ""),
                   "source": info.cpuinfo_source + ": cpu family" + ("; microarchitecture table of hwmodels/host.py"
                                                                      if ua else "")},
        "cores": {"value": info.cores, "source": f"{info.cpuinfo_source}: distinct (physical id, core id) among the "
                                                 f"{info.logical_cpus} CPUs this process may run on"},
        "online_cpus": {"value": info.online_cpus, "source": "/sys/devices/system/cpu/online or os.cpu_count()"},
        "clock_hz": {"value": info.clock_hz, "source": info.clock_source},
        "simd_bits": {"value": info.simd_bits, "source": info.simd_source},
        "hypervisor": {"value": info.hypervisor or "none", "source": info.hypervisor_source},
        "memory_bytes": {"value": info.memory_bytes, "source": info.memory_source},
    }
    for name, (one, allsz) in sorted(info.caches.items()):
        detected[f"cache_{name}"] = {"value": {"bytes_per_instance": one, "bytes_all_instances": allsz,
                                               "cpus_per_instance": info.cache_sharing.get(name, 0)},
                                     "source": info.cache_source}
    if not info.caches:
        detected["caches"] = {"value": None, "source": info.cache_source}
    l3 = l3_from_ladder(plan, pr)
    l3_ws = _fmt_bytes(l3.probe_bytes) if l3 is not None else "-"
    how = {
        "dram_bw": f"np.copyto of a {_fmt_bytes(plan.dram_array_bytes)} array, best of {_COPY_REPEATS['dram']}",
        "l2_bw": f"np.copyto over a {_fmt_bytes(plan.l2_bytes)} working set, best of {_COPY_REPEATS['l2']}",
        "dram_lat": f"pointer chase over {_fmt_bytes(plan.dram_array_bytes)}, {_CHASE_STEPS} steps",
        "l3_lat": f"pointer chase over {l3_ws} (the L3 probe's working set), {_CHASE_STEPS} steps",
        "l2_lat": f"pointer chase over {_fmt_bytes(plan.l2_bytes)}, {_CHASE_STEPS} steps",
        "sf_exp": "NumPy fp32 exp over 256 KiB minus an add, per element",
        "sf_tanh": "NumPy fp32 tanh over 256 KiB minus an add, per element",
        "strided_run": "copy of a 3x3 sliding-window view of a 64x6x6 image, per 4-element run",
        "call_overhead": "NumPy add of two 1-element arrays, per call",
        "dram_buf": "bytes of each DRAM probe array",
    }
    for i, w in enumerate(plan.l3_ladder):
        how[f"l3_ladder_{i}"] = f"L3 ladder: np.copyto over a {_fmt_bytes(w)} working set, best of {_COPY_REPEATS['l3']}"
    path = {"dram_bw": "memory.dram.read_bandwidth_bytes_per_s", "l2_bw": "memory.l2.read_bandwidth_bytes_per_s",
            "dram_lat": "memory.dram.latency_s", "l3_lat": "memory.l3.latency_s", "l2_lat": "memory.l2.latency_s"}

    def clamp_note(field: str) -> str:
        src = spec.provenance.get(field)
        return "clamped: " + src.source.split("; clamped: ", 1)[1] if src and "; clamped: " in src.source else ""

    values: dict[str, dict[str, Any]] = {}
    for k in sorted(pr, key=lambda k: (k.rstrip("0123456789"), len(k), k)):  # l3_ladder_2 before l3_ladder_10
        unit = "B/s" if k.endswith("_bw") or k.startswith("l3_ladder_") else "B" if k == "dram_buf" else "s"
        values[k] = {"value": pr[k], "unit": unit, "how": how.get(k, ""),
                     "clamped": clamp_note(path[k]) if k in path else ""}
    l3_report = None if l3 is None else {
        "usable_bytes_per_instance": l3.usable_bytes, "probe_bytes": l3.probe_bytes,
        "bandwidth_bytes_per_s": l3.bandwidth_bytes_per_s, "threshold_bytes_per_s": l3.threshold_bytes_per_s,
        "rule": l3.rule, "clamped": clamp_note("memory.l3.read_bandwidth_bytes_per_s")}
    return {
        "name": spec.name,
        "description": spec.description,
        "detected": detected,
        "probe_plan": {**dataclasses.asdict(plan), "rules": "hwmodels/host.py module docstring"},
        "probes": {"cache": {"status": probes.cache_status, "file": probes.cache_file,
                             "measured_at": probes.measured_at, "load_average": probes.load_average,
                             "probe_version": PROBE_VERSION},
                   "values": values},
        "l3": l3_report,
        "fallbacks": list(info.fallbacks),
    }


def describe_host(cores: int | None = None) -> str:
    """Multi-line text of :func:`host_report`, then every field of the host spec with its source."""
    from hwmodels.catalog import describe
    from hwmodels.units import format_quantity

    rep = host_report(cores)
    lines = [f"{rep['name']}: {rep['description']}", "", "detected (value  <- source)"]
    for key, d in rep["detected"].items():
        v = d["value"]
        if key == "clock_hz":
            text = format_quantity(v, "Hz")
        elif key == "memory_bytes":
            text = _fmt_bytes(v) if v else "unknown"
        elif key.startswith("cache_"):
            text = (f"{_fmt_bytes(v['bytes_per_instance'])} per instance, {_fmt_bytes(v['bytes_all_instances'])} in "
                    f"all, {v['cpus_per_instance']} CPU(s) per instance")
        elif v is None:
            text = "none"
        else:
            text = str(v)
        lines.append(f"  {key:<14} {text}  <- {d['source']}")
    plan = rep["probe_plan"]
    ladder = ", ".join(_fmt_bytes(w) for w in plan["l3_ladder"]) or "none (no L3)"
    lines += ["", "probe plan (working set = source + destination bytes)",
              f"  l2 copy        {_fmt_bytes(plan['l2_bytes']) if plan['l2_bytes'] else 'not probed (no L2)'}"
              "  <- half of one L2 instance",
              f"  l3 ladder      {ladder}  <- doubling from 2 x L2 up to "
              f"{_fmt_bytes(plan['l3_top_bytes']) if plan['l3_top_bytes'] else '-'}: {plan['l3_rule']}",
              f"  dram copy      {_fmt_bytes(plan['dram_bytes'])}"
              "  <- two arrays of max(4 x L3 all instances, 64 MiB), at most 256 MiB and memory / 8"]
    cache = rep["probes"]["cache"]
    where = cache["file"] or "NODEPERF_NO_CACHE set: timed now, not stored"
    load = "unknown" if cache["load_average"] is None else f"{cache['load_average']:g}"
    lines += ["", f"probes (cache: {cache['status']}; {where}; measured {cache['measured_at']}, 1-minute load "
                  f"average {load}; probe version {cache['probe_version']})"]
    for k, d in rep["probes"]["values"].items():
        text = format_quantity(d["value"], d["unit"]) if d["unit"] != "B" else _fmt_bytes(d["value"])
        lines.append(f"  {k:<14} {text:>12}  <- {d['how']}" + (f"  [{d['clamped']}]" if d["clamped"] else ""))
    lines.append("  (delete the cache file, or set NODEPERF_NO_CACHE=1, to probe again)")
    l3 = rep["l3"]
    if l3 is not None:
        lines += ["", f"l3 (from the ladder): usable {_fmt_bytes(l3['usable_bytes_per_instance'])} per instance, "
                      f"{format_quantity(l3['bandwidth_bytes_per_s'], 'B/s')} at {_fmt_bytes(l3['probe_bytes'])}"
                      + (f"  [{l3['clamped']}]" if l3["clamped"] else ""),
                  f"  <- {l3['rule']}"]
    if rep["fallbacks"]:
        lines += ["", "fallbacks (values that could not be read)"] + [f"  {f}" for f in rep["fallbacks"]]
    lines += ["", "spec (every number with its source)", describe(host_spec(cores))]
    return "\n".join(lines)

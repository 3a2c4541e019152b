"""Describe the machine's own CPU as a DeviceSpec (kind ``"cpu"``) from /proc/cpuinfo, lscpu and short probes.

The host is a device like any catalog entry (``--hardware host``), so calibration works end to end on
machines without accelerators. Every number records where it came from: ``/proc/cpuinfo`` (cores,
SIMD flags, clock), ``lscpu -C`` (cache sizes), ``/proc/meminfo`` (memory size), ``measured: host
probe ...`` (bandwidths, latencies and the per-call overhead, timed here with NumPy), or
``derived: ...`` with the formula. The efficiency factors start from explicitly stated nominal
values; :mod:`simulator.calibration` fits them to measurements.

Peak FLOP rates are ``cores x clock x FMA pipes x lanes x 2`` (a fused multiply-add counts 2 FLOP).
The number of FMA pipes and their datapath width are not visible in /proc/cpuinfo; they come from a
small table of microarchitectures with the vendor's optimisation guide as the source, and otherwise
from an assumption stated in the provenance (one FMA pipe as wide as the widest SIMD flag).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import platform
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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

__all__ = ["HostInfo", "read_host_info", "detect_host", "host_spec", "HOST_NAME"]

logger = logging.getLogger(__name__)

#: The device name of this machine's CPU in measurement files and ``--hardware``.
HOST_NAME = "host"


@dataclass(frozen=True)
class _Microarch:
    name: str
    fma_pipes: int
    datapath_bits: int
    source: str


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
    ),
}


@dataclass(frozen=True)
class HostInfo:
    """What /proc/cpuinfo, lscpu and /proc/meminfo say about this machine (no timing involved)."""

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

    @property
    def microarch(self) -> _Microarch | None:
        return _MICROARCH.get((self.vendor_id, self.family))


def _cpuinfo_blocks() -> list[dict[str, str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
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


def _lscpu_caches() -> dict[str, tuple[int, int]]:
    try:
        out = subprocess.run(["lscpu", "-C", "--bytes"], capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = out.strip().splitlines()
    if not lines:
        return {}
    head = lines[0].split()
    res: dict[str, tuple[int, int]] = {}
    for ln in lines[1:]:
        parts = ln.split()
        row = dict(zip(head, parts, strict=False))
        try:
            res[row["NAME"].lower()] = (int(row["ONE-SIZE"]), int(row["ALL-SIZE"]))
        except (KeyError, ValueError):
            continue
    return res


def _sys_caches() -> dict[str, tuple[int, int]]:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    res: dict[str, tuple[int, int]] = {}
    ncpu = os.cpu_count() or 1
    for idx in sorted(base.glob("index*")):
        try:
            level = (idx / "level").read_text().strip()
            typ = (idx / "type").read_text().strip()
            size = (idx / "size").read_text().strip()
            shared = (idx / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if not m:
            continue
        one = int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)]
        nshare = sum((int(b) - int(a) + 1) if "-" in r else 1
                     for r in shared.split(",") for a, _, b in [r.partition("-")])
        name = f"l{level}" + ("d" if typ == "Data" else "i" if typ == "Instruction" else "")
        res[name] = (one, one * max(1, ncpu // max(1, nshare)))
    return res


def read_host_info() -> HostInfo:
    """Read this machine's CPU description (fast; no probes)."""
    blocks = _cpuinfo_blocks()
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    first = blocks[0] if blocks else {}
    cores_seen = {(b.get("physical id", "0"), b.get("core id", b.get("processor", "0")))
                  for b in blocks if int(b.get("processor", "-1")) in allowed}
    cores = len(cores_seen) or len(allowed)
    flags = frozenset((first.get("flags") or first.get("Features") or "").split())
    if "avx512f" in flags:
        simd = 512
    elif "avx2" in flags or "avx" in flags:
        simd = 256
    elif flags & {"sse2", "asimd", "neon"}:
        simd = 128
    else:
        simd = 64
    mhz = [float(b["cpu MHz"]) for b in blocks if "cpu MHz" in b]
    clock_src = "/proc/cpuinfo: cpu MHz (current clock of the first CPU)"
    clock = mhz[0] * 1e6 if mhz else 0.0
    maxf = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if maxf.is_file():
        try:
            clock = float(maxf.read_text().strip()) * 1e3
            clock_src = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
        except (OSError, ValueError):
            pass
    caches = _lscpu_caches()
    cache_src = "lscpu -C --bytes"
    if not caches:
        caches = _sys_caches()
        cache_src = "/sys/devices/system/cpu/cpu0/cache"
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        family = int(first.get("cpu family", "0"))
    except ValueError:
        family = 0
    return HostInfo(
        model_name=first.get("model name", platform.processor() or "unknown CPU"),
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
    )


# ------------------------------------------------------------------------------------------------
# probes (NumPy; a few hundred milliseconds in all)


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _copy_bandwidth(nbytes: int, repeats: int) -> float:
    """Bytes moved (read + write) per second by np.copyto over a buffer of ``nbytes``."""
    n = max(1, nbytes // 8)
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
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
    x = np.linspace(-4.0, 4.0, n, dtype=np.float32)
    out = np.empty_like(x)
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


@functools.lru_cache(maxsize=4)
def _probes(l2_bytes: int, l3_bytes: int, mem_bytes: int) -> dict[str, float]:
    dram_buf = int(min(256 * 2**20, max(4 * l3_bytes, 64 * 2**20), mem_bytes // 8 or 256 * 2**20))
    out: dict[str, float] = {}
    out["dram_bw"] = _copy_bandwidth(dram_buf, 3)
    out["l3_bw"] = _copy_bandwidth(max(l2_bytes, l3_bytes // 4), 10)
    out["l2_bw"] = _copy_bandwidth(max(16 * 1024, l2_bytes // 4), 30)
    out["dram_buf"] = dram_buf
    out["dram_lat"] = _chase_latency(dram_buf, 100_000)
    out["l3_lat"] = _chase_latency(max(l2_bytes * 2, l3_bytes // 2), 100_000)
    out["l2_lat"] = _chase_latency(max(16 * 1024, l2_bytes // 2), 100_000)
    out.update(_special_function_probe())
    out["strided_run"] = _strided_copy_probe()
    tiny_a = np.ones(1, dtype=np.float32)
    tiny_b = np.ones(1, dtype=np.float32)
    out["call_overhead"] = _best_time(lambda: [np.add(tiny_a, tiny_b) for _ in range(1000)], 5) / 1000
    return out


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def detect_host(info: HostInfo | None = None, *, cores: int | None = None) -> DeviceSpec:
    """The host CPU as a :class:`DeviceSpec` of kind ``"cpu"`` named :data:`HOST_NAME`.

    ``cores`` limits the compute to that many cores (a run with ``--threads N``); default all usable.

    Reads /proc/cpuinfo, lscpu and /proc/meminfo, then runs short NumPy probes (copy bandwidth per
    memory level, dependent-load latency, per-call overhead; well under two seconds). The probes are
    cached per process.
    """
    info = info or read_host_info()
    if cores is not None:
        if not 1 <= cores <= info.cores:
            raise ValueError(f"host: cores; got {cores}; expected 1..{info.cores} (cores this process may use)")
        info = dataclasses.replace(info, cores=cores)
    prov: dict[str, Provenance] = {}
    cpuinfo = "/proc/cpuinfo"
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
              f"x {flop_per_lane} FLOP/FMA; SIMD width from {cpuinfo} flags ({info.simd_bits}-bit); pipes and datapath: {ua_src}")
    for grp in ("tensor_flops_per_s", "vector_flops_per_s"):
        prov[f"compute.{grp}.fp32"] = Provenance(derive)
        prov[f"compute.{grp}.fp64"] = Provenance(derive, "half the fp32 lanes")
        prov[f"compute.{grp}.bf16"] = Provenance(
            derive, "x2: avx512_bf16 dot-product instructions in /proc/cpuinfo flags" if bf16_factor == 2
            else "same as fp32: no bf16 arithmetic flag in /proc/cpuinfo (converted to fp32)")
        prov[f"compute.{grp}.fp16"] = Provenance(
            derive, "x2: avx512_fp16 in /proc/cpuinfo flags" if fp16_factor == 2
            else "same as fp32: no fp16 arithmetic flag in /proc/cpuinfo (converted to fp32)")
    prov["compute.units"] = Provenance(f"{cpuinfo}: distinct (physical id, core id) among the {info.logical_cpus} "
                                       "CPUs this process may run on" + (f"; limited to {cores} by the caller" if cores else ""))
    prov["clock.boost_hz"] = Provenance(info.clock_source)
    prov["clock.sustained_hz"] = Provenance(info.clock_source, "no separate sustained clock is readable")

    l2 = info.caches.get("l2", (0, 0))
    l3 = info.caches.get("l3", (0, 0))
    pr = _probes(l2[0], l3[1], info.memory_bytes)
    levels = []
    dram_cap = float(info.memory_bytes) or float(pr["dram_buf"])
    probe = "measured: host probe"
    levels.append(MemoryLevel(
        "dram", dram_cap, pr["dram_bw"], pr["dram_bw"], pr["dram_lat"], 0.0))
    prov["memory.dram.capacity_bytes"] = Provenance("/proc/meminfo: MemTotal")
    bw_note = "np.copyto, best of repeats, read + write bytes counted"
    prov["memory.dram.read_bandwidth_bytes_per_s"] = Provenance(
        f"{probe}: copy of a {_fmt_bytes(pr['dram_buf'])} buffer", bw_note)
    prov["memory.dram.write_bandwidth_bytes_per_s"] = prov["memory.dram.read_bandwidth_bytes_per_s"]
    lat_note = ("dependent random loads, minus the same chase over a 4 KiB buffer (interpreter cost); "
                "a value at the baseline's run-to-run spread is an upper bound, not resolved")
    prov["memory.dram.latency_s"] = Provenance(f"{probe}: pointer chase over {_fmt_bytes(pr['dram_buf'])}", lat_note)
    prov["memory.dram.energy_j_per_byte"] = Provenance("not modelled: no energy counter is readable on this host")
    # the L2 is private to a core: a run on `cores` cores holds `cores` instances of it
    l2_used = (l2[0], min(l2[1], l2[0] * info.cores) if l2[0] else l2[1])
    for name, (one, allsz), bw, lat, buf in (
        ("l3", l3, pr["l3_bw"], pr["l3_lat"], max(l2[0], l3[1] // 4)),
        ("l2", l2_used, pr["l2_bw"], pr["l2_lat"], max(16 * 1024, l2[0] // 4)),
    ):
        if not allsz:
            continue
        levels.append(MemoryLevel(name, float(allsz), bw, bw, lat, 0.0))
        cap_note = f"{_fmt_bytes(one)} per instance"
        if name == "l2":
            cap_note += f"; one private instance per core used ({info.cores})"
        prov[f"memory.{name}.capacity_bytes"] = Provenance(f"{info.cache_source}: {name.upper()} ONE-SIZE/ALL-SIZE",
                                                           cap_note)
        prov[f"memory.{name}.read_bandwidth_bytes_per_s"] = Provenance(
            f"{probe}: copy of a {_fmt_bytes(buf)} buffer (cache-resident)", bw_note + "; one thread")
        prov[f"memory.{name}.write_bandwidth_bytes_per_s"] = prov[f"memory.{name}.read_bandwidth_bytes_per_s"]
        prov[f"memory.{name}.latency_s"] = Provenance(f"{probe}: pointer chase within the {name.upper()}", lat_note)
        prov[f"memory.{name}.energy_j_per_byte"] = prov["memory.dram.energy_j_per_byte"]

    overhead = pr["call_overhead"]
    eff = EfficiencySpec(
        tensor_peak_fraction=1.0,
        vector_peak_fraction=1.0,
        dram_bandwidth_fraction=1.0,
        l2_bandwidth_fraction=1.0,
        bandwidth_half_size_bytes=max(1.0, pr["dram_bw"] * overhead),
        launch_overhead_s=overhead,
        graph_launch_overhead_s=overhead,
    )
    nominal = "nominal: 1 (no derating) before calibration; `nodeperf calibrate` fits it to measurements"
    prov["efficiency.tensor_peak_fraction"] = Provenance(nominal)
    prov["efficiency.vector_peak_fraction"] = Provenance(nominal)
    prov["efficiency.dram_bandwidth_fraction"] = Provenance(nominal, "the DRAM bandwidth is itself a probe of a copy")
    prov["efficiency.l2_bandwidth_fraction"] = Provenance(nominal, "applies to the cache levels (l2, l3) on a CPU")
    prov["efficiency.launch_overhead_s"] = Provenance(f"{probe}: NumPy add of two 1-element arrays, per call",
                                                      "the framework's per-op dispatch cost")
    prov["efficiency.graph_launch_overhead_s"] = Provenance(f"{probe}: as launch_overhead_s",
                                                            "a CPU has no graph launch; equal to launch_overhead_s")
    prov["efficiency.bandwidth_half_size_bytes"] = Provenance(
        "derived: dram bandwidth x per-call overhead (the size at which a copy reaches half its asymptotic bandwidth)")
    lanes = max(1, width // 32)
    cpu = CpuSpec(
        gemm_peak_fraction=1.0,
        dnn_peak_fraction=1.0,
        gemm_half_m=float(lanes),
        gemm_half_n=float(lanes),
        gemm_half_k=float(lanes),
        special_function_s={name: pr[f"sf_{name}"] / info.cores for name in _SPECIAL_FUNCTIONS},
        strided_copy_run_s=pr["strided_run"] / info.cores,
        library_call_overhead_s=overhead,
    )
    prov["cpu.gemm_peak_fraction"] = Provenance(nominal, "the BLAS library's GEMM (fp32 matmul, im2col convolutions)")
    prov["cpu.dnn_peak_fraction"] = Provenance(nominal, "the primitive library (oneDNN): direct convolutions, bf16/fp16 GEMMs")
    half = (f"derived: fp32 lanes of one {width}-bit SIMD register ({lanes}), the granularity at which a "
            "vectorised micro-kernel pads a matrix side; `nodeperf calibrate` fits it")
    for side in ("m", "n", "k"):
        prov[f"cpu.gemm_half_{side}"] = Provenance(half)
    for name in _SPECIAL_FUNCTIONS:
        prov[f"cpu.special_function_s.{name}"] = Provenance(
            f"{probe}: NumPy fp32 {name} over a 256 KiB buffer minus an add over the same buffers, per element",
            f"one core; divided by the {info.cores} core(s) used")
    prov["cpu.strided_copy_run_s"] = Provenance(
        f"{probe}: NumPy copy of a 3x3 sliding-window view (im2col) of a 64x6x6 fp32 image, per 4-element run",
        f"one core; divided by the {info.cores} core(s) used")
    prov["cpu.library_call_overhead_s"] = Provenance(
        f"{probe}: as efficiency.launch_overhead_s (one more call per op) before calibration",
        "primitive lookup/creation of oneDNN calls; `nodeperf calibrate` fits it")
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


@functools.lru_cache(maxsize=8)
def host_spec(cores: int | None = None) -> DeviceSpec:
    """:func:`detect_host` once per process and core count (the probes are not repeated)."""
    return detect_host(cores=cores)

"""Run microbenchmark suites and whole networks on a real device and record robust timings as Measurements.

Every case is a workload the rest of the project understands (a micro-workload string such as
``gemm:m=512,n=512,k=512`` or a zoo model with batch/seq/phase), built as an OpGraph and executed by
:mod:`simulator.calibration.executor`, so what is timed is exactly what the models predict. Timing: warm-up runs
until ``warmup_s`` has passed (at least two), then repetitions until ``budget_s`` has passed (between
``min_reps`` and ``max_reps``); each repetition is synchronised with the device (CUDA events on GPUs,
``time.perf_counter`` on CPUs). Statistics: median, minimum, inter-quartile range.

With ``passes`` above one the cases are timed in rounds: every case is built once, then each round runs
every case for its share of the budget (one untimed run first, to bring its data back into the caches
the other cases used), in a new seeded random order after the first round; a case's statistics pool
its repetitions of all rounds. Noise on a shared machine (other tenants of a VM host, frequency
changes) comes in bursts of a fraction of a second to seconds, which a case timed in one window either
catches or misses whole; spread over rounds, every case samples many windows. This is Google
Benchmark's random interleaving (``--benchmark_enable_random_interleaving``, docs/random_interleaving.md:
"able to lower run-to-run variance by 40% on average"); on the 2-core AMD EPYC KVM guest of
docs/calibration.md five rounds cut the quick suite's run-to-run difference of case medians (mean over
cases, three pairs of back-to-back runs) from 14.0-23.8% to 8.2-9.4% (5.3-17.1% in a second set taken
at a noisier time). The price: every case's tensors stay allocated until the last round (about 1.4 GB
for the CPU quick suite), so the default is one round on GPUs.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import math
import platform
import re
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwmodels.host import HOST_NAME
from simulator.calibration.executor import compile_graph, torch_available
from simulator.calibration.measurements import Measurement, MeasurementSet, case_label

__all__ = ["Case", "TimingPolicy", "suite", "SUITES", "time_runner", "run_cases", "environment", "catalog_gpu_name",
           "detect_device_name", "portable_loop_reason"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Case:
    """One benchmark case: a workload with the arguments that rebuild its graph."""

    workload: str
    dtype: str
    category: str = ""
    batch: int | None = None
    seq: int | None = None
    phase: str | None = None
    train: bool = False

    @property
    def label(self) -> str:
        return case_label(self.workload, self.dtype, self.batch, self.seq, self.phase, self.train)


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often to run each case (seconds)."""

    warmup_s: float = 0.05
    budget_s: float = 0.25
    min_reps: int = 5
    max_reps: int = 200
    passes: int = 1  # rounds over the cases; budget and repetition limits are shared among them
    warmup_runs: int = 2  # untimed runs at least, whatever ``warmup_s``

    def __post_init__(self) -> None:
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or self.passes < 1:
            raise ValueError(f"TimingPolicy: passes; got {self.passes!r}; expected an integer >= 1")

    def round(self, index: int) -> TimingPolicy:
        """The policy of round ``index`` (0-based) of :attr:`passes`: the budget and the repetition limits
        shared out; after the first round one untimed run (the case's data back into the caches)."""
        if self.passes == 1:
            return self
        share = self.passes
        return TimingPolicy(warmup_s=self.warmup_s if index == 0 else 0.0, budget_s=self.budget_s / share,
                            min_reps=max(1, math.ceil(self.min_reps / share)),
                            max_reps=max(1, math.ceil(self.max_reps / share)),
                            warmup_runs=self.warmup_runs if index == 0 else 1)


def _gemm(m: int, n: int, k: int, dt: str, b: int = 1) -> Case:
    w = f"gemm:m={m},n={n},k={k}" + (f",b={b}" if b > 1 else "")
    return Case(w, dt, "gemm")


def _quick_cpu() -> list[Case]:
    cases: list[Case] = []
    for dt in ("fp32", "bf16"):
        for s in (64, 128, 256, 512, 1024):  # square: small to large
            cases.append(_gemm(s, s, s, dt))
        cases += [_gemm(8, 1024, 1024, dt), _gemm(1024, 64, 1024, dt), _gemm(2048, 2048, 32, dt),
                  _gemm(256, 4096, 256, dt), _gemm(32, 32, 32, dt)]
    cases += [_gemm(128, 128, 64, "fp32", b=32), _gemm(256, 256, 64, "fp32", b=16)]
    cases += [
        Case("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1", "fp32", "conv2d"),
        Case("conv2d:n=1,c=3,h=224,w=224,k=64,r=7,s=7,stride=2,pad=3", "fp32", "conv2d"),
        Case("conv2d:n=1,c=256,h=28,w=28,k=128,r=1,s=1", "fp32", "conv2d"),
        Case("conv2d:n=4,c=32,h=32,w=32,k=32,r=3,s=3,pad=1", "fp32", "conv2d"),
        # one image below PyTorch's oneDNN size threshold: the im2col + BLAS path
        Case("conv2d:n=1,c=64,h=16,w=16,k=64,r=3,s=3,pad=1", "fp32", "conv2d"),
    ]
    for nbytes in (2**20, 2**23, 2**26, 2**28):
        cases.append(Case(f"copy:bytes={nbytes}", "fp32", "copy"))
    for numel in (2**16, 2**20, 2**24):
        cases.append(Case(f"elementwise:numel={numel},op=add", "fp32", "elementwise"))
    cases += [Case("elementwise:numel=4194304,op=gelu", "fp32", "elementwise"),
              Case("elementwise:numel=4194304,op=relu", "fp32", "elementwise")]
    for rows, cols in ((1024, 1024), (4096, 1024), (8192, 256)):
        cases.append(Case(f"softmax:rows={rows},cols={cols}", "fp32", "softmax"))
        cases.append(Case(f"layernorm:rows={rows},cols={cols}", "fp32", "layernorm"))
    cases += [Case("attention:b=1,h=8,s=512,d=64,causal=0", "fp32", "attention"),
              Case("attention:b=1,h=8,s=1024,d=64,causal=1", "fp32", "attention"),
              Case("attention:b=4,h=12,s=256,d=64,causal=0", "fp32", "attention")]
    return cases


def _full_extra() -> list[Case]:
    cases: list[Case] = []
    for dt in ("fp32", "bf16", "fp16"):
        for s in (96, 192, 384, 768, 1536, 2048):
            cases.append(_gemm(s, s, s, dt))
        for m in (1, 16, 64):
            cases.append(_gemm(m, 4096, 4096, dt))
        cases += [_gemm(4096, 128, 4096, dt), _gemm(4096, 4096, 128, dt)]
    for b, s in ((64, 64), (8, 512)):
        cases.append(_gemm(s, s, 64, "fp32", b=b))
    cases += [Case("conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1", "fp32", "conv2d"),
              Case("conv2d:n=8,c=512,h=7,w=7,k=512,r=3,s=3,pad=1", "fp32", "conv2d")]
    for numel in (2**18, 2**22, 2**26):
        for op in ("mul", "silu"):
            cases.append(Case(f"elementwise:numel={numel},op={op}", "fp32", "elementwise"))
    cases += [Case(f"softmax:rows={r},cols={c}", "fp32", "softmax") for r, c in ((512, 4096), (32768, 128))]
    cases += [Case(f"layernorm:rows={r},cols={c}", "fp32", "layernorm") for r, c in ((512, 4096), (16384, 768))]
    cases += [Case("attention:b=1,h=16,s=2048,d=64,causal=1", "fp32", "attention"),
              Case("attention:b=2,h=32,s=512,d=128,causal=0,kv_heads=8", "fp32", "attention")]
    return cases


def _networks(full: bool) -> list[Case]:
    """Whole networks from the zoo (only those the zoo currently provides)."""
    # resnet18 at its native 224x224 input (seq is the image side for CNNs)
    wanted = [("resnet18", 1, 224, "forward"), ("bert_base", 1, 64, "forward")]
    if full:
        wanted += [("resnet50", 1, 224, "forward"), ("gpt2", 1, 128, "prefill")]
    out = []
    try:
        from workloads.zoo import get_entry
    except ImportError:  # pragma: no cover - the zoo is part of the package
        return out
    for name, b, s, ph in wanted:
        try:
            entry = get_entry(name)
        except (KeyError, FileNotFoundError, ImportError, ValueError) as exc:
            logger.info("network %s not in the zoo (%s); skipped", name, exc)
            continue
        phase = ph if ph in entry.phases else entry.phases[0]
        out.append(Case(name, "fp32", f"e2e_{entry.family}", batch=b, seq=s, phase=phase))
    return out


SUITES: dict[str, Callable[[str], list[Case]]] = {
    "quick": lambda dev: _quick_cpu() + _networks(False),
    "full": lambda dev: _quick_cpu() + _full_extra() + _networks(True),
}


def suite(name: str, device: str = "cpu", *, networks: bool = True) -> list[Case]:
    """The cases of suite ``name`` (``quick`` or ``full``) for ``device``."""
    if name not in SUITES:
        raise ValueError(f"suite: unknown name; got {name!r}; expected one of {', '.join(SUITES)}")
    cases = SUITES[name](device)
    return cases if networks else [c for c in cases if not c.category.startswith("e2e")]


def time_runner(run: Callable[[], Any], sync: Callable[[], None], policy: TimingPolicy,
                cuda_events: Any = None) -> np.ndarray:
    """Per-repetition times (s) of ``run()`` after warm-up, each bracketed by ``sync()``."""
    t_end = time.perf_counter() + policy.warmup_s
    n = 0
    while n < policy.warmup_runs or time.perf_counter() < t_end:
        run()
        n += 1
    sync()
    times: list[float] = []
    t_stop = time.perf_counter() + policy.budget_s
    while len(times) < policy.min_reps or (len(times) < policy.max_reps and time.perf_counter() < t_stop):
        if cuda_events is not None:
            start, stop = cuda_events()
            start.record()
            run()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e-3)
        else:
            sync()
            t0 = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - t0)
    return np.asarray(times)


def environment(device: str, backend: str) -> dict[str, str]:
    """Metadata columns of this run: framework, versions, clock, date, host."""
    env = {"framework": backend, "framework_version": "", "driver_version": "", "clock_hz": "",
           "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
           "host": f"{socket.gethostname()} ({platform.processor() or platform.machine()})"}
    if backend == "torch":
        import torch

        env["framework_version"] = torch.__version__
        if device.startswith("cuda"):
            env["driver_version"] = _gpu_software(torch)
            env["host"] += f"; {torch.cuda.get_device_name(torch.device(device))}"
    else:
        env["framework_version"] = np.__version__
    if device == "cpu":
        from hwmodels.host import read_host_info

        info = read_host_info()
        env["host"] = f"{info.hostname} ({info.model_name}, {info.cores} cores)"
        if info.clock_hz:
            env["clock_hz"] = repr(float(info.clock_hz))
    return env


def _gpu_software(torch: Any) -> str:
    """Driver and runtime versions of a GPU run: ``"driver 550.54.15; CUDA 12.4; cuDNN 90100"`` (what is readable).

    The kernel driver's version comes from NVML (``pynvml``, optional); the runtime is the CUDA or
    HIP version this torch was built with (``torch.version.cuda`` is None on ROCm builds).
    """
    parts = []
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        parts.append(f"driver {v.decode() if isinstance(v, bytes) else v}")
    except Exception as exc:  # noqa: BLE001 - optional metadata: NVML missing or failing leaves it out
        logger.info("measure: GPU driver version not readable (%s)", exc)
    if getattr(torch.version, "hip", None):
        parts.append(f"HIP {torch.version.hip}")
    elif torch.version.cuda:
        parts.append(f"CUDA {torch.version.cuda}")
    dnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if dnn:
        parts.append(f"{'MIOpen' if getattr(torch.version, 'hip', None) else 'cuDNN'} {dnn}")
    return "; ".join(parts)


def _gpu_clock_hz(torch: Any, dev: Any) -> float | None:
    """SM clock over the last sampling period (``torch.cuda.clock_rate``, needs NVML), Hz; None if not readable.

    Read right after a case's timed repetitions, so the sample covers the GPU while it was busy.
    """
    try:
        mhz = torch.cuda.clock_rate(dev)
    except Exception as exc:  # noqa: BLE001 - optional metadata: NVML missing or unsupported leaves it blank
        logger.info("measure: GPU clock not readable (%s)", exc)
        return None
    return float(mhz) * 1e6 if mhz and mhz > 0 else None


#: Board form factors as NVIDIA device names state them ("A100-SXM4-80GB", "H100 PCIe", "H200 NVL").
_FORM_FACTORS = ("sxm", "pcie", "nvl")


def _form_factor(tokens: Sequence[str]) -> str | None:
    for t in tokens:
        head = t.rstrip("0123456789")
        if head in _FORM_FACTORS:
            return head
    return None


def catalog_gpu_name(reported: str, memory_bytes: float, names: Sequence[str]) -> str:
    """The catalog device a GPU is, from the name it reports (``torch.cuda.get_device_name``) and its memory.

    Candidates are the ``names`` whose model (the first dash-separated part, ``h100`` of
    ``h100-sxm5-80gb``) is a word of the reported name. Among several, the board form factor the
    name states (``SXM4``, ``PCIe``, ``NVL``) selects; a name that states none is the SXM board
    (NVIDIA names the others: "NVIDIA H100 PCIe" but "NVIDIA H100 80GB HBM3" for the SXM5 part);
    then the memory size in the catalog name (``80gb``) nearest to ``memory_bytes``.

    Raises
    ------
    ValueError
        No catalog device, or several, match (the message lists them; pass ``--device-name``).
    """
    words = re.findall(r"[a-z0-9]+", reported.lower())
    cands = [n for n in names if n.lower().split("-")[0] in words]
    if len(cands) > 1:
        ff = _form_factor(words)
        same = [n for n in cands if _form_factor(n.lower().split("-")[1:]) == ff]
        if ff is None:
            same = same or [n for n in cands if _form_factor(n.lower().split("-")[1:]) == "sxm"]
        cands = same or cands
    if len(cands) > 1 and memory_bytes > 0:
        def gap(n: str) -> float:
            m = re.search(r"(\d+)gb", n.lower())
            return abs(math.log(int(m.group(1)) * 2**30 / memory_bytes)) if m else math.inf

        best = min(gap(n) for n in cands)
        cands = [n for n in cands if gap(n) == best]
    if len(cands) != 1:
        got = f"{reported!r} with {memory_bytes / 2**30:.1f} GiB"
        if not cands:
            raise ValueError(f"measure: device name; got {got}, not in the catalog; expected --device-name with a "
                             "catalog name (`nodeperf hardware` lists them)")
        raise ValueError(f"measure: device name; got {got}, which could be {' or '.join(sorted(cands))}; expected "
                         "--device-name to choose")
    return cands[0]


def _require_cuda(torch: Any, device: str) -> Any:
    """``torch.device(device)`` after checking that torch sees that CUDA (or ROCm) device."""
    if not torch.cuda.is_available():
        raise ValueError(f"measure: device {device!r}: torch sees no CUDA device; expected a GPU and a CUDA build "
                         f"of torch (this one is {torch.__version__})")
    dev = torch.device(device)
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"measure: device {device!r}: no such GPU; got index {dev.index}; expected "
                         f"0..{torch.cuda.device_count() - 1}")
    return dev


def detect_device_name(device: str) -> str:
    """The catalog name of the GPU ``device`` (``"cuda"``, ``"cuda:1"``) is; see :func:`catalog_gpu_name`."""
    import torch

    from simulator.hardware import known_devices

    dev = _require_cuda(torch, device)
    props = torch.cuda.get_device_properties(dev)
    return catalog_gpu_name(props.name, float(props.total_memory), known_devices())


def _fp32_precision_flags(torch: Any) -> tuple[list[tuple[Any, str]], tuple[Any, Any]]:
    """The (object, attribute) switches choosing TF32 or IEEE fp32 for CUDA matmuls, convolutions and RNNs,
    and their (tf32, ieee) values: ``fp32_precision`` since PyTorch 2.9, ``allow_tf32`` before."""
    b = torch.backends
    if hasattr(b.cuda.matmul, "fp32_precision") and hasattr(b.cudnn, "conv"):
        return [(b.cuda.matmul, "fp32_precision"), (b.cudnn.conv, "fp32_precision"),
                (b.cudnn.rnn, "fp32_precision")], ("tf32", "ieee")
    return [(b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32")], (True, False)


@contextmanager
def _execution_mode(torch: Any, device: str, dtype: str, needs_autograd: bool) -> Iterator[None]:
    """Grad mode and fp32 arithmetic of one case, restored afterwards.

    Inference mode, unless the graph has ops that differentiate through autograd (``*_bwd`` kernels
    built on ``torch.autograd.grad``), which inference tensors do not allow: then no-grad mode.
    On CUDA, fp32 matmuls and convolutions run in IEEE fp32 unless the case's dtype is ``tf32``:
    PyTorch's defaults differ (cuBLAS IEEE, cuDNN convolutions TF32), which would time an fp32
    convolution on TF32 tensor cores.
    """
    grad = torch.no_grad() if needs_autograd else torch.inference_mode()
    if not device.startswith("cuda"):
        with grad:
            yield
        return
    flags, (tf32, ieee) = _fp32_precision_flags(torch)
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr in flags]
    try:
        for obj, attr in flags:
            setattr(obj, attr, tf32 if dtype == "tf32" else ieee)
        with grad:
            yield
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)


def _keep_freed_memory() -> bool:
    """Ask glibc to reuse freed blocks instead of returning large ones to the OS (best effort).

    Without this every repetition of a large CPU op pays first-touch page faults on a freshly
    mapped output buffer, which is allocator behaviour, not the op's cost; GPU frameworks avoid it
    with a caching allocator. Returns whether the setting took effect.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        m_trim_threshold, m_mmap_threshold = -1, -3  # glibc malloc.h
        ok = libc.mallopt(m_mmap_threshold, 1 << 30) == 1 and libc.mallopt(m_trim_threshold, 1 << 30) == 1
    except (OSError, AttributeError):
        return False
    logger.info("measure: glibc mallopt (reuse freed memory) %s", "set" if ok else "not available")
    return ok


#: Op categories whose cases time a contraction (a GEMM): on a CPU they run the dtype's library path.
_CONTRACTION_CATEGORIES = frozenset({"gemm", "conv2d", "attention"})


def portable_loop_reason(case: Case, device: str, backend: str, info: Any = None) -> str:
    """Why ``case`` is not timed on this machine's CPU, or ``""``.

    A bf16/fp16 contraction on a CPU without the ISA of oneDNN's path for that dtype runs ATen's
    portable GEMM loops (:func:`hwmodels.host.low_precision_library`): the host model prices them at one
    measured median rate (``cpu.reference_gemm_flops_per_s``) whose shapes spread by a factor of two or
    more either side, so such a case carries no information for the library fields a calibration fits
    and would only add that spread to its errors. The case is reported as skipped with this reason.
    ``info``: the :class:`hwmodels.host.HostInfo` to judge by (None: read it now).
    """
    if device != "cpu" or backend != "torch" or case.dtype not in ("bf16", "fp16") \
            or case.category not in _CONTRACTION_CATEGORIES:
        return ""
    from hwmodels.host import low_precision_library, read_host_info

    library, why = low_precision_library(info if info is not None else read_host_info(), case.dtype)
    return "" if library else f"{why}: priced at one median rate, not calibrated"


def run_cases(
    cases: Sequence[Case],
    *,
    device: str = "cpu",
    device_name: str | None = None,
    backend: str = "auto",
    policy: TimingPolicy | None = None,
    seed: int = 0,
    progress: Callable[[int, int, Case, Measurement | None], None] | None = None,
    threads: int | None = None,
) -> tuple[MeasurementSet, list[tuple[Case, str]]]:
    """Measure ``cases`` on ``device``; returns the measurements and the (case, reason) pairs skipped.

    Parameters
    ----------
    device
        ``"cpu"`` or a CUDA device string.
    device_name
        What the ``device`` column says: a catalog name for a GPU; None: ``"host"`` on the CPU, the
        detected catalog name on a GPU (:func:`detect_device_name`).
    backend
        ``"torch"``, ``"numpy"`` (CPU only) or ``"auto"``.
    policy
        Warm-up, budget, repetitions and rounds (:class:`TimingPolicy`; ``passes`` above one keeps every
        case's tensors until the last round, see the module docstring).
    progress
        Called once per case with (index, total, case, measurement or None when skipped): when the case
        is skipped, or after its last round.
    threads
        CPU threads for torch (None: the framework's default).
    """
    policy = policy or TimingPolicy()
    if backend == "auto":
        backend = "torch" if torch_available() else "numpy"
    if device != "cpu" and backend != "torch":
        raise ValueError(f"measure: device {device!r} needs torch; got backend {backend!r}; expected torch installed")
    torch, gpu, events, device_name = _backend_handles(device, device_name, backend, threads)
    if device == "cpu":
        _keep_freed_memory()
    run = _MeasureRun(cases=cases, device=device, device_name=device_name or HOST_NAME, backend=backend,
                      policy=policy, seed=seed, progress=progress, torch=torch, gpu=gpu, events=events,
                      env=environment(device, backend))
    order = list(range(len(cases)))
    rng = np.random.default_rng(seed)
    for r in range(policy.passes):
        if r:  # Google Benchmark's random interleaving: a new order every round
            order = [int(i) for i in rng.permutation(len(cases))]
        for i in order:
            if i in run.failed or (r == 0 and run.skipped_as_unportable(i)):
                continue
            run.measure_round(i, r)
    done = sorted(run.measured)  # case order, whatever the last round's order
    rows = [dataclasses.replace(run.measured[i], id=f"{run.device_name}-{k + 1:03d}") for k, i in enumerate(done)]
    return MeasurementSet(tuple(rows), f"measured on {device}"), run.skipped


def _backend_handles(device: str, device_name: str | None, backend: str,
                     threads: int | None) -> tuple[Any, Any, Callable[[], tuple[Any, Any]] | None, str | None]:
    """Import torch when the backend needs it: (torch, cuda device, CUDA event factory, device name)."""
    torch: Any = None
    gpu: Any = None
    events = None
    if backend == "torch":
        import torch

        if threads:
            torch.set_num_threads(threads)
        if device.startswith("cuda"):
            gpu = _require_cuda(torch, device)
            device_name = device_name or detect_device_name(device)

            def events() -> tuple[Any, Any]:
                return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    return torch, gpu, events, device_name


@dataclass
class _MeasureRun:
    """One :func:`run_cases` call: its settings and what each round kept, timed, measured and skipped."""

    cases: Sequence[Case]
    device: str
    device_name: str
    backend: str
    policy: TimingPolicy
    seed: int
    progress: Callable[[int, int, Case, Measurement | None], None] | None
    torch: Any
    gpu: Any
    events: Any
    env: dict[str, Any]
    skipped: list[tuple[Case, str]] = dataclasses.field(default_factory=list)
    failed: dict[int, str] = dataclasses.field(default_factory=dict)
    kept: dict[int, Any] = dataclasses.field(default_factory=dict)  # case index -> runner, between rounds
    times: dict[int, list[np.ndarray]] = dataclasses.field(default_factory=dict)
    measured: dict[int, Measurement] = dataclasses.field(default_factory=dict)
    host_info: Any = None

    def measurement(self, case: Case, t: np.ndarray) -> Measurement:
        """The measurement row of ``case`` from its timings ``t``."""
        env, passes = self.env, self.policy.passes
        env_clock_hz = float(env["clock_hz"]) if env["clock_hz"] else None
        q1, med, q3 = np.percentile(t, [25, 50, 75])
        return Measurement(
            id="", workload=case.workload, device=self.device_name, dtype=case.dtype, median_s=float(med),
            category=case.category, batch=case.batch, seq=case.seq, phase=case.phase,
            train=case.train if case.category.startswith("e2e") else None,
            min_s=float(t.min()), repetitions=int(t.size), iqr_s=float(q3 - q1),
            framework=env["framework"], framework_version=env["framework_version"],
            driver_version=env["driver_version"],
            clock_hz=_gpu_clock_hz(self.torch, self.gpu) if self.gpu is not None else env_clock_hz,
            date=env["date"], host=env["host"],
            source=f"measured: nodeperf measure --device {self.device} ({self.backend}"
                   + (f", {passes} interleaved rounds)" if passes > 1 else ")"),
        )

    def skip(self, i: int, reason: str, warn: str) -> None:
        """Record case ``i`` as skipped for ``reason`` (logging ``warn`` when not empty)."""
        if warn:
            logger.warning(warn)
        self.failed[i] = reason
        self.skipped.append((self.cases[i], reason))
        if self.progress:
            self.progress(i, len(self.cases), self.cases[i], None)

    def skipped_as_unportable(self, i: int) -> bool:
        """Skip case ``i`` (first round) when its dtype has no portable loop on this host; True if skipped."""
        case = self.cases[i]
        if (self.host_info is None and self.device == "cpu" and self.backend == "torch"
                and case.dtype in ("bf16", "fp16")):
            from hwmodels.host import read_host_info

            self.host_info = read_host_info()  # once per run, not per case
        reason = portable_loop_reason(case, self.device, self.backend, self.host_info)
        if reason:
            self.skip(i, reason, "" if any(x == reason for _, x in self.skipped)  # one warning per reason
                      else f"measure: {case.dtype} cases skipped: {reason}")
        return bool(reason)

    def measure_round(self, i: int, r: int) -> None:
        """Time case ``i`` for round ``r``: keep its runner for the next round or record its measurement."""
        from workloads.ir import UnsupportedOpError
        from workloads.resolve import load_workload

        case, torch = self.cases[i], self.torch
        runner = self.kept.pop(i, None)
        try:
            if runner is None:
                graph = load_workload(case.workload, batch=case.batch, seq=case.seq, phase=case.phase,
                                      train=case.train, dtype=case.dtype)
                runner = compile_graph(graph, device=self.device, backend=self.backend, seed=self.seed)
            mode = (nullcontext() if torch is None
                    else _execution_mode(torch, self.device, case.dtype, runner.needs_autograd))
            with mode:
                self.times.setdefault(i, []).append(time_runner(runner, runner.synchronize,
                                                                self.policy.round(r), self.events))
            if r < self.policy.passes - 1:
                self.kept[i] = runner
            else:
                self.measured[i] = self.measurement(case, np.concatenate(self.times.pop(i)))
                if self.progress:
                    self.progress(i, len(self.cases), case, self.measured[i])
        except (UnsupportedOpError, NotImplementedError, RuntimeError, TypeError) as exc:
            reason = str(exc).splitlines()[0]
            self.times.pop(i, None)
            self.skip(i, reason, f"measure: {case.label} skipped: {reason}")
        finally:
            del runner  # the case's tensors go before the next case allocates its own (last round)
            if self.gpu is not None and i not in self.kept:
                torch.cuda.empty_cache()

"""Small GEMMs timed three ways, with the kernels each call launched: what separates a kernel's cost from a timer's.

The small Hopper GEMM rows of the published set are timed two ways that disagree (docs/accuracy.md, "Kernel-time
rows"): OpenXLA's table stores CUPTI kernel records (serialized kernel trace), triton-lang/triton issue #2339 a
``do_bench`` event pair after a 256 MB L2 flush. This part times the same shapes and operand layouts, on one GPU,
by each method:

* ``flush_events``: the ``do_bench`` recipe of ``triton.testing`` @ 3fb4e466 (``fast_flush=False``): zero a 256 MB
  int8 buffer, record an event, call, record an event; all calls queued, one synchronisation; the median;
* ``graph``: the calls captured in one CUDA graph and replayed; the replay's time over the calls (GPU only);
* ``profiler``: ``torch.profiler`` (kineto's CUPTI activity records) over the calls: every kernel's name and
  device time, summed per call; the names say which library kernel ran (tile, cluster, split-K reduction).

On the CPU dry run the timer is ``time.perf_counter`` and the graph method is left out.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

#: Bytes zeroed before each ``flush_events`` call: ``do_bench``'s cache buffer (256 MB of int8).
FLUSH_BYTES = 256 * 10**6
#: Calls per method (the dry run: 3).
CALLS = 20
#: The ops whose time stands for the kernels on the CPU dry run (no kernel records there).
CPU_GEMM_OPS = ("aten::mm", "aten::bmm")


def operands(torch: Any, s: Any, dtype: str, device: str) -> Any:
    """A closure running ``C = A @ B`` of shape ``s`` (``_cases.GemmShape``: transpose bit 1 A stored (k, m),
    bit 2 B stored (n, k)); ``tf32`` is fp32 storage with TF32 matmuls allowed while the closure runs."""
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    lead = (s.b,) if s.b > 1 else ()
    a = torch.randn(*lead, s.k, s.m, device=device, dtype=dt).transpose(-1, -2) if s.transpose & 1 \
        else torch.randn(*lead, s.m, s.k, device=device, dtype=dt)
    b = torch.randn(*lead, s.n, s.k, device=device, dtype=dt).transpose(-1, -2) if s.transpose & 2 \
        else torch.randn(*lead, s.k, s.n, device=device, dtype=dt)
    tf32 = dtype == "tf32"

    def call() -> Any:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            return torch.matmul(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    return call


def flush_events(torch: Any, fn: Any, device: str, calls: int, flush_bytes: int = FLUSH_BYTES) -> list[float]:
    """Per-call times (s) of ``fn`` after an L2 flush each, ``do_bench``'s way; ``perf_counter`` on the CPU."""
    cache = torch.empty(flush_bytes, dtype=torch.int8, device=device)
    fn()
    if not device.startswith("cuda"):
        out = []
        for _ in range(calls):
            cache.zero_()
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return sorted(out)
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    torch.cuda.synchronize()
    for start, stop in pairs:
        cache.zero_()
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return sorted(start.elapsed_time(stop) * 1e-3 for start, stop in pairs)


def graph_per_call(torch: Any, fn: Any, calls: int) -> float:
    """Seconds per call of ``calls`` calls captured in one CUDA graph, from the second replay's event pair."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # the library's workspace and handles before capture
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    g.replay()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e-3 / calls


def profiled_kernels(torch: Any, fn: Any, device: str, calls: int) -> tuple[float, str]:
    """(device seconds per call, ``name x launches per call`` of every kernel) from ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    gpu = device.startswith("cuda")
    fn()
    with profile(activities=[ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        if gpu:
            torch.cuda.synchronize()
    total, names = 0.0, Counter()
    for ev in prof.events():
        kernel = gpu and "cuda" in str(getattr(ev, "device_type", "")).lower()
        if kernel or (not gpu and ev.name in CPU_GEMM_OPS):  # the CPU dry run: the library GEMM calls
            total += ev.time_range.elapsed_us() * 1e-6
            names[ev.name] += 1
    listed = "; ".join(f"{n} x {c / calls:g}" for n, c in sorted(names.items()))
    return total / calls, listed


def rows(torch: Any, cases: list[tuple[Any, str]], device: str, calls: int = CALLS,
         flush_bytes: int = FLUSH_BYTES) -> list[dict[str, str]]:
    """One row per (shape, dtype, method)."""
    out = []
    for s, dtype in cases:
        fn = operands(torch, s, dtype, device)
        base = {"workload": s.workload, "dtype": dtype}
        t = flush_events(torch, fn, device, calls, flush_bytes)
        out.append({**base, "method": "flush_events", "median_s": repr(t[len(t) // 2]), "min_s": repr(t[0]),
                    "kernels": ""})
        if device.startswith("cuda"):
            g = graph_per_call(torch, fn, calls)
            out.append({**base, "method": "graph", "median_s": repr(g), "min_s": repr(g), "kernels": ""})
        per_call, names = profiled_kernels(torch, fn, device, calls)
        out.append({**base, "method": "profiler", "median_s": repr(per_call), "min_s": "", "kernels": names})
    return out

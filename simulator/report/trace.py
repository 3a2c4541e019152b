"""Chrome trace writer: a CostReport's schedule as Trace Event Format JSON (chrome://tracing, Perfetto).

One complete event (``"ph": "X"``) per op on the track it ran on (one thread per compute stream, one
for the link; ops that take no resource, such as views, go to a track of their own with zero
duration), and one event per host launch on the host's track. Timestamps and durations are in
microseconds, as the format requires. Reports of the discrete-event engine carry their schedule
(:class:`simulator.report.scheduled.ScheduledOpCost`); reports of the analytical engine are laid out back to back
on one stream, in record order, which is how that engine composes them.
"""

from __future__ import annotations

from typing import Any

from simulator.report.report import CostReport, OpCost
from simulator.report.scheduled import ScheduledOpCost

__all__ = ["report_to_chrome_trace", "plan_to_chrome_trace", "DEVICE_PID", "HOST_PID", "NO_KERNEL_TRACK", "PLAN_TRACKS"]

#: Trace process ids: the device's tracks (streams, link) and the host's launch track.
DEVICE_PID = 0
HOST_PID = 1
#: Track of ops that take no resource (views, no-op collectives).
NO_KERNEL_TRACK = "no kernel"
_US_PER_S = 1e6


def _track_order(name: str) -> tuple[int, int, str]:
    if name.startswith("stream "):
        tail = name[len("stream "):]
        if tail.isdigit():
            return (0, int(tail), name)
    if name == NO_KERNEL_TRACK:
        return (2, 0, name)
    return (1, 0, name)


def _args(r: OpCost) -> dict[str, Any]:
    a: dict[str, Any] = {"group": r.group, "kind": r.kind, "bound": r.bound, "rule": r.rule, "flops": r.flops,
                         "dram_bytes": r.dram_bytes, "energy_j": r.energy_j, "kernels": r.kernels}
    if r.tile:
        a["tile"] = r.tile
    if r.fused_into:
        a["fused_into"] = r.fused_into
    return a


def report_to_chrome_trace(report: CostReport) -> dict[str, Any]:
    """The report's schedule as a Trace Event Format object (``json.dump`` it to a ``.json`` file).

    Parameters
    ----------
    report
        A report of either engine.

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``: metadata events
        naming the processes and tracks, then one ``"X"`` event per record in record order
        (``ts``/``dur`` in us, ``cat`` the op kind), then one ``"X"`` event per host launch
        (``cat`` ``"launch"``). Deterministic for a given report.
    """
    timed = all(isinstance(r, ScheduledOpCost) for r in report.records)
    placed: list[tuple[OpCost, float, str]] = []
    t = 0.0
    for r in report.records:
        if isinstance(r, ScheduledOpCost) and timed:
            placed.append((r, r.start_s, r.track or NO_KERNEL_TRACK))
        else:
            placed.append((r, t, "stream 0" if (r.kernels > 0 or r.time_s > 0) else NO_KERNEL_TRACK))
            t += r.time_s
    tracks = sorted({trk for _, _, trk in placed}, key=_track_order)
    tid = {name: i for i, name in enumerate(tracks)}

    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": DEVICE_PID, "tid": 0, "args": {"name": report.hardware}},
        {"ph": "M", "name": "process_sort_index", "pid": DEVICE_PID, "tid": 0, "args": {"sort_index": 0}},
    ]
    for name in tracks:
        events.append({"ph": "M", "name": "thread_name", "pid": DEVICE_PID, "tid": tid[name], "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": DEVICE_PID, "tid": tid[name],
                       "args": {"sort_index": tid[name]}})
    launches = [r for r in report.records
                if isinstance(r, ScheduledOpCost) and r.kernels > 0 and not r.fused_into]
    if launches:
        events.append({"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": HOST_PID, "tid": 0, "args": {"sort_index": 1}})
        events.append({"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 0, "args": {"name": "launch"}})

    for r, start_s, track in placed:
        events.append({"name": r.name, "cat": r.kind, "ph": "X", "ts": start_s * _US_PER_S,
                       "dur": r.time_s * _US_PER_S, "pid": DEVICE_PID, "tid": tid[track], "args": _args(r)})
    for r in launches:
        t0, t1 = r.launch_start_s, r.launch_end_s
        events.append({"name": f"launch {r.name}", "cat": "launch", "ph": "X", "ts": t0 * _US_PER_S,
                       "dur": (t1 - t0) * _US_PER_S, "pid": HOST_PID, "tid": 0,
                       "args": {"op": r.name, "kernels": r.kernels}})
    prov = report.provenance
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"model": report.model, "hardware": report.hardware, "engine": str(prov.get("engine", "")),
                      "streams": str(prov.get("streams", 1)), "latency_s": repr(report.latency_s)},
    }


# ----------------------------------------------------------------------------------------------
# Parallel plans: one process per pipeline stage, one track per stream
# ----------------------------------------------------------------------------------------------

#: Tracks of a pipeline stage's process in a plan trace.
PLAN_TRACKS = ("compute", "communication", "data-parallel sync")


def _plan_passes(res: Any) -> tuple[list[list[tuple[str, int, int, float, float]]], float]:
    """Per stage, its passes (kind, microbatch, chunk, start_s, end_s) and when the last one ended.

    Training: the plan's schedule (:func:`simulator.parallel.pipeline_des.simulate_pipeline`) over the
    per-microbatch chunk times the step's pipeline was scheduled with (``res.pipeline.chunk_fwd_s``: the stages'
    times less the communication a stack overlaps with compute), else over the stages' own times; with the
    bottleneck on the last stage, as an LM head makes it, it ends exactly at the closed form's step.
    Inference: one batch through the stages in turn."""
    stages = res.stages
    if res.pipeline is None:
        out, t = [], 0.0
        for s in stages:
            out.append([("F", 0, 0, t, t + s.forward_s)])
            t += s.forward_s
        return out, t
    from simulator.parallel.pipeline_des import simulate_pipeline

    v = max(1, int(getattr(res.plan, "interleave", 1) or 1))
    fwd = [[s.forward_s / v] * v for s in stages]
    bwd = [[s.backward_s / v] * v for s in stages]
    pipe = res.pipeline
    if len(pipe.chunk_fwd_s) == len(stages) and all(len(c) == v for c in pipe.chunk_fwd_s):
        fwd, bwd = [list(c) for c in pipe.chunk_fwd_s], [list(c) for c in pipe.chunk_bwd_s]
    trace = simulate_pipeline(fwd, bwd, res.plan.microbatches, res.plan.schedule)
    return [list(p) for p in trace.passes], trace.pipeline_s


def _x(name: str, cat: str, start_s: float, end_s: float, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "cat": cat, "ph": "X", "ts": start_s * _US_PER_S, "dur": max(0.0, end_s - start_s) * _US_PER_S,
            "pid": pid, "tid": tid, "args": args}


def _stage_events(res: Any, s: int, passes: list[tuple[str, int, int, float, float]]) -> list[dict[str, Any]]:
    """The passes of stage ``s``: each one's computation on the compute track, then its share of the
    stage's communication (tensor-parallel collectives, pipeline sends) on the communication track."""
    st = res.stages[s]
    work = st.forward_s + st.backward_s
    sched = _scheduled_pass_s(res, s)
    events = []
    for kind, mb, chunk, t0, t1 in passes:
        whole = st.forward_s if kind == "F" else st.backward_s
        ran = sched[0 if kind == "F" else 1] or whole  # the pass as scheduled: less what runs beside compute
        share = st.communication_s * (whole / work) if work > 0 else 0.0
        frac = (t1 - t0) / ran if ran > 0 else 0.0  # this chunk's part of the stage's pass
        comm = min(whole * frac, share * frac)
        exposed = min(t1 - t0, max(0.0, comm - max(0.0, whole - ran) * frac))
        label = ("forward" if kind == "F" else "backward")
        args = {"microbatch": mb, "chunk": chunk, "pass": label}
        events.append(_x(f"{kind}{mb}" + (f".{chunk}" if chunk else ""), label, t0, t1 - exposed, s, 0, args))
        if comm > 0:
            note = "the pass's share of the stage's communication_s" + (
                ", part of it beside the compute (overlapped)" if comm > exposed * (1 + 1e-12) else "")
            events.append(_x(f"{kind}{mb} collectives", "collective", max(t0, t1 - comm), t1, s, 1,
                             {**args, "note": note}))
    return events


def _scheduled_pass_s(res: Any, s: int) -> tuple[float, float]:
    """Stage ``s``'s (forward, backward) seconds of one microbatch as the step's pipeline scheduled them (zeros
    where it keeps none)."""
    pipe = res.pipeline
    if pipe is None or len(pipe.chunk_fwd_s) <= s:
        return 0.0, 0.0
    return sum(pipe.chunk_fwd_s[s]), sum(pipe.chunk_bwd_s[s])


def _tail_events(res: Any, s: int, anchor: float) -> list[dict[str, Any]]:
    """After the pipeline: the data-parallel gradient synchronisation (overlapped with the last backward
    but its exposed part), the ZeRO parameter gathers and the optimizer step, as the step's slowest
    tail (the values the result keeps) drawn on every stage."""
    b = res.breakdown
    events = []
    sync, exposed, opt = b.get("dp_sync_s", 0.0), b.get("dp_sync_exposed_s", 0.0), b.get("optimizer_s", 0.0)
    if sync > 0:
        events.append(_x("data-parallel gradient sync", "collective", max(0.0, anchor - (sync - exposed)),
                         anchor + exposed, s, 2, {"dp_sync_s": sync, "exposed_s": exposed}))
    t = anchor + exposed
    gather = max(0.0, res.latency_s - t - opt)
    if gather > 1e-15 * max(1.0, res.latency_s) and res.pipeline is not None:
        events.append(_x("ZeRO parameter all-gather", "collective", t, t + gather, s, 1, {}))
        t += gather
    if res.latency_s > t:
        events.append(_x("optimizer step", "optimizer", t, res.latency_s, s, 0, {"optimizer_s": opt}))
    return events


def plan_to_chrome_trace(res: Any) -> dict[str, Any]:
    """A parallel plan's step (:class:`simulator.parallel.compose.ParallelResult`) as a Trace Event Format
    object: one process per pipeline stage (one of its devices), with a compute, a communication and a
    data-parallel track; microbatch forward and backward passes in the plan's schedule, collectives as
    their own events, the pipeline bubble as the gaps. The last event ends at the predicted step
    time (``latency_s``), the tail anchored at the model's pipeline step."""
    passes, pipe_end = _plan_passes(res)
    model_pipe = res.pipeline.step_s if res.pipeline is not None else pipe_end
    anchor = max(model_pipe, pipe_end)
    events: list[dict[str, Any]] = []
    plan = res.plan
    for s, st in enumerate(res.stages):
        name = f"stage {s} (layers {', '.join(f'{a}-{b - 1}' for a, b in st.layers)})"
        events.append({"ph": "M", "name": "process_name", "pid": s, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": s, "tid": 0, "args": {"sort_index": s}})
        for tid, track in enumerate(PLAN_TRACKS):
            events.append({"ph": "M", "name": "thread_name", "pid": s, "tid": tid, "args": {"name": track}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": s, "tid": tid, "args": {"sort_index": tid}})
    for s in range(len(res.stages)):
        events += _stage_events(res, s, passes[s])
        if res.pipeline is not None:
            events += _tail_events(res, s, anchor)
    bubble = res.pipeline.bubble_s if res.pipeline is not None else 0.0
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"model": res.model, "hardware": res.hardware, "engine": res.engine, "phase": res.phase,
                      "plan": f"tp {plan.tp} pp {plan.pp} dp {plan.dp} schedule {plan.schedule}",
                      "microbatches": str(plan.microbatches if res.pipeline is not None else 1),
                      "latency_s": repr(res.latency_s), "pipeline_s": repr(model_pipe),
                      "schedule_drawn_s": repr(pipe_end), "bubble_s": repr(bubble)},
    }

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

__all__ = ["report_to_chrome_trace", "DEVICE_PID", "HOST_PID", "NO_KERNEL_TRACK"]

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

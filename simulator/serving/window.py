"""Which requests a time-window benchmark client counts: perf_analyzer's measurement windows, as genai-perf
runs them with ``--measurement-interval`` (:attr:`simulator.serving.ServeConfig.measurement_interval_s`).

The rules, from ``triton-inference-server/perf_analyzer`` (``src/inference_profiler.cc``, the same at
dbdaff8a, 2025-04-25, and 263c5f6, 2025-12-15):

* the load starts (a closed loop's N clients at once) and the first window opens; each window lasts the
  interval x 1.2 (``Measure`` sleeps ``measurement_window * 1.2`` ms) and the next opens where it closed;
* a window counts the requests whose last response arrives inside it (``ValidLatencyMeasurement``: "Only
  counting requests that end within the time interval"); a request still running when the last window
  closes is not counted;
* after each window, the last 3 windows (``load_parameters_.stability_window = 3``) are stable when each
  counted at least one request and both their throughput (counted requests / window) and their mean
  latency vary by at most the stability percentage (max / min <= 1 + pct / 100,
  ``IsInferWindowStable`` / ``IsLatencyWindowStable``); measuring stops at the first stable window or after
  ``max_trials`` = 10 windows (``command_line_parser.h``);
* every window's counted requests go to the profile export (``CollectData`` -> ``ProfileDataCollector::
  AddData`` appends them), and genai-perf averages TTFT and inter-token latency over all of them and
  divides their output tokens by last response - first request start
  (``genai_perf/profile_data_parser/llm_profile_data_parser.py``).

genai-perf's default stability percentage is 999 (``genai_perf/config/input/config_defaults.py``
``STABILITY_PERCENTAGE``; its ``--measurement-interval`` help: "When using the default stability percentage,
GenAI-Perf will benchmark for 3*(measurement_interval) milliseconds"), so three windows that each count a
request end the measurement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["WINDOW_SLEEP_FACTOR", "STABILITY_WINDOWS", "MAX_WINDOWS", "GENAI_PERF_STABILITY_PERCENTAGE",
           "measured_windows"]

#: perf_analyzer sleeps this multiple of the measurement interval per window (``InferenceProfiler::Measure``).
WINDOW_SLEEP_FACTOR = 1.2
#: Consecutive windows that must agree (``load_parameters_.stability_window``).
STABILITY_WINDOWS = 3
#: Windows measured at most (perf_analyzer ``--max-trials`` default).
MAX_WINDOWS = 10
#: genai-perf's default ``--stability-percentage``.
GENAI_PERF_STABILITY_PERCENTAGE = 999.0


def _stable(counts: Sequence[int], latencies: Sequence[float], pct: float) -> bool:
    """The last :data:`STABILITY_WINDOWS` windows agree within ``pct`` percent (and each counted a request)."""
    c, lat = counts[-STABILITY_WINDOWS:], latencies[-STABILITY_WINDOWS:]
    if len(c) < STABILITY_WINDOWS or min(c) == 0:
        return False
    bound = 1.0 + pct / 100.0
    return max(c) / min(c) <= bound and max(lat) / min(lat) <= bound


def measured_windows(records: Sequence[Any], interval_s: float, stability_pct: float = GENAI_PERF_STABILITY_PERCENTAGE,
                     start_s: float = 0.0) -> tuple[list[Any], dict[str, Any]]:
    """The requests the windows count (records with ``arrival_s`` and ``finish_s``), and how they were
    measured: ``{"interval_s", "window_s", "windows", "stable", "end_s", "counted_requests"}``.

    ``start_s``: when the first window opens (the load's start)."""
    width = WINDOW_SLEEP_FACTOR * interval_s
    counts: list[int] = []
    latencies: list[float] = []
    stable = False
    k = 0
    for k in range(1, MAX_WINDOWS + 1):
        lo, hi = start_s + (k - 1) * width, start_s + k * width
        lat = [r.finish_s - r.arrival_s for r in records if lo <= r.finish_s <= hi]
        counts.append(len(lat))
        latencies.append(sum(lat) / len(lat) if lat else float("inf"))
        if _stable(counts, latencies, stability_pct):
            stable = True
            break
    end = start_s + k * width
    chosen = [r for r in records if start_s <= r.finish_s <= end]
    return chosen, {"interval_s": interval_s, "window_s": width, "windows": k, "stable": stable, "end_s": end,
                    "counted_requests": len(chosen), "stability_percentage": stability_pct}

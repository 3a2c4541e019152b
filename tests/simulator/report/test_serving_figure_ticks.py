"""`plot serving`: the TTFT / TPOT axes' tick labels are plain numbers that never overlap, whatever the span."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from simulator.report.figures import serving_figure


def _run(lo: float, hi: float, seed: int) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    return pd.DataFrame({"ttft_s": r.uniform(lo, hi, 200), "tpot_s": r.uniform(0.01, 0.03, 200),
                         "finish_s": np.linspace(1.0, 100.0, 200), "output_len": 10})


@pytest.mark.parametrize("lo, hi", [(0.012, 0.016), (0.04, 0.09), (0.02, 0.5), (0.3, 0.35), (0.001, 30.0)])
def test_latency_tick_labels_do_not_overlap(lo: float, hi: float) -> None:
    fig = serving_figure([("a", _run(lo, hi, 0)), ("b", _run(lo * 1.1, hi * 1.2, 1))])
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:2]:
        labels = [t for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_visible() and t.get_text()]
        assert not [t for t in ax.get_xticklabels(minor=True) if t.get_text()]  # minor ticks unlabelled
        assert len(labels) >= 2
        assert all(float(t.get_text()) > 0 for t in labels)  # plain numbers, not 2x10^1
        boxes = [t.get_window_extent(renderer) for t in labels]
        clash = [(labels[i].get_text(), labels[j].get_text()) for i in range(len(boxes))
                 for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]
        assert not clash, clash


@pytest.mark.parametrize("lo, hi", [(0.0055, 0.045), (0.006, 0.03), (0.012, 0.016), (0.3, 0.35), (0.04, 0.09)])
def test_latency_ticks_label_the_low_end_of_a_span_under_a_decade(lo: float, hi: float) -> None:
    """Under a decade, evenly spaced (linear) ticks crowd the top of a log axis and leave its low end bare: TPOT
    CDFs of 3 runs at 6-10, 8-12 and 14-45 ms were labelled 15, 30 and 45 only, the two faster runs' curves
    without a number under them. The stretch from either end of the axis to its nearest labelled tick is at
    most a third of the axis (in log space)."""
    r = np.random.default_rng(2)
    runs = [(name, pd.DataFrame({"ttft_s": r.uniform(lo, hi, 100), "tpot_s": r.uniform(a, b, 100),
                                 "finish_s": np.linspace(1.0, 100.0, 100), "output_len": 10}))
            for name, a, b in (("a", lo, lo * 1.3), ("b", lo * 1.4, lo * 1.6), ("c", hi * 0.3, hi))]
    fig = serving_figure(runs)
    FigureCanvasAgg(fig).draw()
    for ax in fig.axes[:2]:
        x0, x1 = ax.get_xlim()
        ticks = sorted(float(t.get_text()) for t in ax.get_xticklabels() if t.get_visible() and t.get_text()
                       and x0 <= float(t.get_text()) <= x1)
        assert len(ticks) >= 2, ticks
        edges = np.log10([x0, *ticks, x1])
        ends = max(edges[1] - edges[0], edges[-1] - edges[-2])
        assert ends <= (edges[-1] - edges[0]) / 3, (ax.get_xlabel(), x0, x1, ticks)

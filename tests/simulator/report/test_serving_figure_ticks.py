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

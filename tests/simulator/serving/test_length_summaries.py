"""Named length summaries: the ShareGPT one reproduces its source's means and the benchmark's clips."""

from __future__ import annotations

import math

import numpy as np

from simulator.serving.lengths import LENGTH_DATASETS, describe, parse_lengths, sample_lengths


def test_sharegpt_means_and_clips():
    spec = parse_lengths("sharegpt")
    assert spec.kind == "lognormal" and "sglang/issues/2097" in spec.source
    # 269,081 / 1200 and 226,901 / 1200 (sglang issue #2097); sigma sqrt(ln 2) is a CV of 1
    assert math.isclose(spec.get("in_mean"), 224.234, rel_tol=1e-4)
    assert math.isclose(spec.get("out_mean"), 189.084, rel_tol=1e-4)
    assert math.isclose(math.sqrt(math.exp(spec.get("in_sigma") ** 2) - 1), 1.0)
    ins, outs = sample_lengths(spec, 200_000, np.random.default_rng(0))
    assert ins.max() <= 1024 and outs.max() <= 2044 and ins.min() >= 1
    # the clip at 1024 removes ~1.3 % of prompts (z = (ln 1024 - mu) / sigma = 2.24): the mean stays within 3 %
    assert abs(ins.mean() / 224.234 - 1) < 0.03 and abs(outs.mean() / 189.084 - 1) < 0.02
    assert describe(parse_lengths("sharegpt:prefix=2"))["shared_prefix_tokens"] == 2
    assert set(LENGTH_DATASETS) == {"sharegpt"}


def test_sharegpt_seed0_200_draw_tail():
    # docs/serving.md explains the 200-prompt bursts with this draw (the validation's seed 0, a burst draws
    # lengths first): the three longest outputs and the three longest prompts of 200
    ins, outs = sample_lengths(parse_lengths("sharegpt"), 200, np.random.default_rng(0))
    assert sorted(outs.tolist())[-3:] == [1120, 1326, 1717]
    assert sorted(ins.tolist())[-3:] == [723, 811, 840]

"""Named length summaries: the ShareGPT one reproduces its source's means and the benchmark's filter."""

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
    # the benchmark's filter drops pairs (prompt > 1024, prompt + output > 2048, either < 4): none is left
    assert ins.max() <= 1024 and (ins + outs).max() <= 2048 and min(ins.min(), outs.min()) >= 4
    # and the source's means are of the kept pairs: the lognormals are set so that the kept pairs have them
    # (before the filter the prompt mean is 243.7, the output mean 191.1; rounding leaves 0.3 %)
    assert abs(ins.mean() / 224.234 - 1) < 0.005 and abs(outs.mean() / 189.084 - 1) < 0.005
    assert describe(parse_lengths("sharegpt:prefix=2"))["shared_prefix_tokens"] == 2
    assert set(LENGTH_DATASETS) == {"sharegpt", "azure-code-2023", "azure-conv-2023"}


def test_sharegpt_seed0_200_draw_tail():
    # docs/serving.md explains the 200-prompt bursts with this draw (the validation's seed 0, a burst draws
    # lengths first): the three longest outputs and the three longest prompts of 200
    ins, outs = sample_lengths(parse_lengths("sharegpt"), 200, np.random.default_rng(0))
    assert sorted(outs.tolist())[-3:] == [953, 1132, 1341]
    assert sorted(ins.tolist())[-3:] == [785, 881, 913]


def test_sharegpt_filter_drops_and_redraws_only_the_dropped_pairs():
    from simulator.serving.lengths import _lognormal_pairs, _unfiltered_mus

    spec = parse_lengths("sharegpt")
    raw_in, raw_out = _lognormal_pairs(spec, 5000, np.random.default_rng(0), _unfiltered_mus(spec))
    ins, outs = sample_lengths(spec, 5000, np.random.default_rng(0))
    kept = (raw_in >= 4) & (raw_out >= 4) & (raw_in <= 1024) & (raw_out <= 2044) & (raw_in + raw_out <= 2048)
    assert 0 < (~kept).sum() < 200  # about 1.5 % of pairs fall outside the filter
    assert np.array_equal(ins[kept], raw_in[kept]) and np.array_equal(outs[kept], raw_out[kept])
    assert not np.array_equal(ins[~kept], raw_in[~kept])
    assert (ins + outs).max() <= 2048 and ins.max() <= 1024


def test_azure_2023_means_of_the_trace():
    # Azure/AzurePublicDataset data/AzureLLMInferenceTrace_{code,conv}.csv, every row: means and medians of
    # ContextTokens / GeneratedTokens (code 2047.8 / 1469, 27.9 / 13; conversation 1154.7 / 1020, 211.1 / 129)
    for name, (mi, medi, mo, medo, top_i, top_o) in {"azure-code-2023": (2047.8, 1469, 27.9, 13, 7437, 1899),
                                                    "azure-conv-2023": (1154.7, 1020, 211.1, 129, 14050, 1000)}.items():
        spec = parse_lengths(name)
        assert "AzureLLMInferenceTrace" in spec.source and "Splitwise" in spec.source
        # the lognormal through mean and median: mean = median * exp(sigma^2 / 2)
        assert math.isclose(medi * math.exp(spec.get("in_sigma") ** 2 / 2), mi)
        assert math.isclose(medo * math.exp(spec.get("out_sigma") ** 2 / 2), mo)
        ins, outs = sample_lengths(spec, 200_000, np.random.default_rng(0))
        assert ins.max() <= top_i and outs.max() <= top_o and min(ins.min(), outs.min()) >= 1
        # rounding to whole tokens leaves 1.5 % on the code outputs (mean 27.5 of 27.9), under 0.5 % elsewhere
        assert abs(ins.mean() / mi - 1) < 0.005 and abs(outs.mean() / mo - 1) < 0.02


def test_azure_name_misspelt_suggests():
    import pytest

    from simulator.serving.config import ServingError

    with pytest.raises(ServingError, match="did you mean 'azure-conv-2023'"):
        parse_lengths("azure-conv-2032")

"""The filtered data-set lengths: a shared prefix must leave room under the prompt cap, and a filter that keeps
no pair of the lognormals, or means the filtered lognormals cannot reach, is a ServingError (not NaN means)."""

from __future__ import annotations

import pytest

from simulator.serving.config import ServingError
from simulator.serving.lengths import LengthSpec, _unfiltered_mus, parse_lengths, sample_lengths


def _spec(**kw: float) -> LengthSpec:
    base = {"in_sigma": 0.8, "out_sigma": 0.8, "out_mean": 100.0, "min_len": 4.0, "total_max": 2048.0}
    return LengthSpec("lognormal", tuple(sorted({**base, **kw}.items())))


def test_sharegpt_prefix_up_to_one_under_the_prompt_cap() -> None:
    import numpy as np

    spec = parse_lengths("sharegpt:prefix=1023")
    ins, _ = sample_lengths(spec, 64, np.random.default_rng(0))
    assert int(ins.min()) == 1024 and int(ins.max()) == 1024  # the prefix and one token: still inside in <= 1024
    with pytest.raises(ServingError, match=r"prefix: got 1024; expected fewer than 1024 tokens"):
        parse_lengths("sharegpt:prefix=1024")


def test_a_filter_keeping_no_pair_is_an_error() -> None:
    _unfiltered_mus.cache_clear()
    with pytest.raises(ServingError, match=r"keeps no pair"):  # prompts at most 10, every length at least 50
        _unfiltered_mus(_spec(in_mean=200.0, in_max=10.0, min_len=50.0))


def test_means_beyond_the_cap_are_an_error() -> None:
    _unfiltered_mus.cache_clear()
    with pytest.raises(ServingError):  # a filtered mean of 2000 under in <= 1024 cannot be reached
        _unfiltered_mus(_spec(in_mean=2000.0, in_max=1024.0))

"""tune searches serving precision on one-device inference graphs; with parallel plans it refuses and names the
command that takes one precision with a plan (predict --weight-dtype/--kv-dtype --tp N)."""

from __future__ import annotations

import pytest

from simulator.sweep.tune_model import ModelProblem, TuneError


def test_precision_with_plans_names_predict():
    with pytest.raises(TuneError, match=r"--weight-dtype/--kv-dtype: tune searches serving precision on one-device "
                                        r"inference graphs only; got parallel plans .*predict --weight-dtype/--kv-dtype"
                                        r"` with --tp/--pp"):
        ModelProblem("llama-2-7b", ["dgx-h100"], batch=[8], phase="decode", context=1024, tp=[2], kv_dtype="fp8")

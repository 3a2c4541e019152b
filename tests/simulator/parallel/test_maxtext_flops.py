"""MaxText's own FLOP count (simulator/parallel/maxtext_flops.py) against the log lines the dataset copies.

Each MaxText step-time row of published_training.csv quotes the log line it was read from
('seconds: S, TFLOP/s/device: R, ...'); S x R is the FLOP count MaxText computed for that run, so it checks
both the formula version and the recipe the row records (per-device batch, sequence, model dimensions).
"""

from __future__ import annotations

import re

import pytest

from simulator.parallel.maxtext_flops import (
    maxtext_flop_version,
    maxtext_flops_per_device,
    maxtext_param_count,
)
from simulator.parallel.training_validation import load_training_rows
from workloads.zoo.transformer import zoo_config

_LOG = re.compile(r"seconds: ([\d.]+), TFLOP/s/device: ([\d.]+)")

#: dense step-time rows and the formula version of the MaxText they ran: the non-causal count of
#: maxtext_utils.py at 770fcf7d1 / 14b5876ea / 9f1820b47 (tpu-recipes-v0.1.2 and v0.1.4, the late-2024 main of
#: train-127 and train-135), the causal one from a4c01726e on (train-131 pins 3eb77db)
_DENSE = {**{f"train-{i}": "2024" for i in (*range(111, 124), 126, 127, 135)}, "train-131": "2025"}


def _rows() -> dict[str, object]:
    return {r.id: r for r in load_training_rows()}


@pytest.mark.parametrize("row_id", sorted(_DENSE))
def test_logged_tflops_times_seconds_is_maxtexts_count_of_the_recorded_recipe(row_id):
    row = _rows()[row_id]
    seconds, rate = (float(x) for x in _LOG.search(row["notes"]).groups())
    g = row.ints
    count = maxtext_flops_per_device(zoo_config(row["model"]), batch=g["global_batch"] / g["n_devices"],
                                     seq=g["seq"], version=_DENSE[row_id])
    assert seconds * rate * 1e12 == pytest.approx(count, rel=5e-4)


def test_the_late_2024_count_takes_attention_without_the_causal_mask():
    # GPT-3 175B, 3 sequences of 2,048 (train-126), by hand from maxtext_utils.py @ 14b5876ea:
    # per token and layer: MLP 2 x 12288 x 49152 x 2 = 2,415,919,104; q/k/v 2 x 12288 x 288 x 128 = 905,969,664;
    # out 2 x 96 x 128 x 12288 = 301,989,888; LM head 2 x 12288 x 50257 = 1,235,116,032; attention
    # 4 x 2048 x 96 x 128 = 100,663,296 per token and layer, not halved
    tokens = 3 * 2048
    learnable = ((2_415_919_104 + 905_969_664 + 301_989_888) * 96 + 1_235_116_032) * 3 * tokens
    attention = 100_663_296 * 96 * 3 * tokens
    cfg = zoo_config("gpt3-175b")
    assert maxtext_flops_per_device(cfg, batch=3, seq=2048, version="2024") == pytest.approx(learnable + attention)
    assert maxtext_flops_per_device(cfg, batch=3, seq=2048, version="2025") == pytest.approx(learnable + attention / 2)
    # the non-causal attention term is 2.7% of this count (22% of Llama 3 8B's at 8,192 tokens)
    assert attention / (learnable + attention) == pytest.approx(0.0270, abs=5e-4)


def test_the_2023_count_is_six_n_t_plus_half_the_attention():
    # maxtext-16b-2023: 32 layers of 4 x 5120 x 8192 attention kernels, 2 x 5120 x 32768 ReLU MLP kernels and
    # two 5120 norm scales, the tied 32768 x 5120 embedding and the final norm
    n = 32 * (4 * 5120 * 8192 + 2 * 5120 * 32768 + 2 * 5120) + 32768 * 5120 + 5120
    cfg = zoo_config("maxtext-16b-2023")
    assert maxtext_param_count(cfg) == n == 16_274_232_320
    expected = 6 * n * 2048 * 6 + 12 * 32 * 32 * 256 * 2048**2 * 6 / 2
    assert maxtext_flops_per_device(cfg, batch=6, seq=2048, version="2023") == pytest.approx(expected)


def test_only_the_2023_tables_are_mapped_to_a_version_for_their_mfu():
    versions = {r.id: maxtext_flop_version(r["framework_version"]) for r in load_training_rows()
                if r["framework"].startswith("MaxText") and r["metric"].strip() == "mfu"}
    assert len(versions) == 40 and set(versions.values()) == {"2023"}


def test_moe_models_and_unknown_versions_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="'mixtral-8x7b' is not a dense decoder"):
        maxtext_flops_per_device(zoo_config("mixtral-8x7b"), batch=1, seq=4096, version="2024")
    with pytest.raises(ValueError, match=r"version '2022'; expected one of 2023, 2024, 2025"):
        maxtext_flops_per_device(zoo_config("gpt3-175b"), batch=1, seq=2048, version="2022")

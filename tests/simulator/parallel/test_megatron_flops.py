"""Megatron-Bridge's own FLOP count (simulator/parallel/megatron_flops.py) against the tables it prints.

Each Megatron-Bridge row of published_training.csv records, beside its tokens/s per GPU, the "Model TFLOP/s/GPU"
the same table prints (its ``notes``); their ratio is the FLOP count per token the source used, so it checks both
the formula and the zoo model's dimensions (hidden size, layers, heads, experts, vocabulary) for every such row.
"""

from __future__ import annotations

import re

import pytest

from simulator.parallel.megatron_flops import megatron_flops_per_token, megatron_padded_vocab
from simulator.parallel.training_validation import load_training_rows
from workloads.zoo.transformer import zoo_config

_PRINTED = re.compile(r"Model TFLOP/s/GPU ([\d.]+?)\.?(?:\s|$)")


def _printed_rows() -> list[object]:
    return [r for r in load_training_rows() if _PRINTED.search(r["notes"])]


def test_the_gpt_oss_rows_are_among_the_printed_ones():
    ids = {r.id for r in _printed_rows()}
    assert {"train-058", "train-063", "train-067"} <= ids and len(ids) >= 18  # train-053 .. train-070


@pytest.mark.parametrize("row", _printed_rows(), ids=lambda r: r.id)
def test_printed_tflops_is_the_count_times_the_printed_tokens_per_second(row):
    # both figures are printed to three or more digits and averaged over the run's timed steps: within 1%
    printed = float(_PRINTED.search(row["notes"]).group(1))
    count = megatron_flops_per_token(zoo_config(row["model"]), seq=row.ints["seq"], tp=row.ints.get("tp") or 1)
    assert count * row.value / 1e12 == pytest.approx(printed, rel=0.01)


def test_gpt_oss_by_hand():
    # per token and layer, multiply-adds as transformer_flops counts them: q 2880 x 4096, k and v 2880 x 512 each,
    # out 4096 x 2880, the causal core 4096 x 4096 (s/2 keys for QK^T and for PV), 4 experts of two 2880 x 2880
    # projections (quick_gelu: not F.silu, so no 3/2); the LM head 2880 x 201088; x 6 for forward and backward
    per_layer = 2880 * 4096 + 2 * 2880 * 512 + 4096 * 2880 + 4096 * 4096 + 4 * 2 * 2880 * 2880
    expected = 6 * (36 * per_layer + 2880 * 201088)
    assert megatron_flops_per_token(zoo_config("gpt-oss-120b"), seq=4096) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(27.164e9, rel=1e-4)


def test_the_silu_gate_adds_half_the_mlp():
    # Llama 3 8B at 8,192 (train-053): 32 layers, three 4096 x 14336 projections
    cfg = zoo_config("llama-3-8b")
    per_layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 8192 * 4096 + 3 * 4096 * 14336
    expected = 6 * (32 * per_layer + 4096 * 128256)
    assert megatron_flops_per_token(cfg, seq=8192) == pytest.approx(expected, rel=1e-12)


def test_vocabulary_padding_follows_the_tensor_parallel_degree():
    assert megatron_padded_vocab(151936, 1) == 151936
    assert megatron_padded_vocab(151936, 2) == 152064
    assert megatron_padded_vocab(129280, 8) == 130048


def test_refuses_an_encoder():
    with pytest.raises(ValueError, match="not a decoder-only"):
        megatron_flops_per_token(zoo_config("bert-base"), seq=512)

"""The diagnostic split of a predicted MaxText step (simulator/parallel/maxtext_breakdown.py)."""

from __future__ import annotations

import re

import pytest

from simulator.parallel.maxtext_breakdown import StepBreakdown, precision_pair_split


def _bd(measured: float | None, predicted: float, gather: float, reduce: float, exposed: float) -> StepBreakdown:
    return StepBreakdown(row_id="r", system="s", tokens_per_chip=1.0, measured_step_s=measured,
                         predicted_step_s=predicted, compute_s=10.0, gemm_s=9.0, attention_s=0.5, other_s=0.5,
                         tp_comm_s=0.0, fsdp_gather_s=gather, grad_reduce_s=reduce, exposed_s=exposed,
                         offload_exposed_s=0.0)


def test_beyond_collectives_subtracts_only_the_hidden_part_of_the_fsdp_collectives():
    # 17.18 s measured, 11.52 s predicted, 1.93 + 0.97 s of collectives of which 0.02 s already exposed:
    # 17.18 - 11.52 - (2.90 - 0.02) = 2.78 s that no serial collective accounts for
    b = _bd(17.18, 11.52, 1.93, 0.97, 0.02)
    assert b.beyond_collectives_s == pytest.approx(2.78)
    assert b.step_error == pytest.approx(11.52 / 17.18 - 1.0)


def test_beyond_collectives_is_negative_when_serial_collectives_would_overshoot():
    assert _bd(10.0, 9.0, 1.5, 0.5, 0.0).beyond_collectives_s == pytest.approx(-1.0)


def test_beyond_collectives_needs_a_measured_step():
    assert _bd(None, 9.0, 1.0, 0.5, 0.0).beyond_collectives_s is None


def _step(measured: float | None, predicted: float, gemm: float) -> StepBreakdown:
    return StepBreakdown(row_id="r", system="s", tokens_per_chip=1.0, measured_step_s=measured,
                         predicted_step_s=predicted, compute_s=predicted, gemm_s=gemm, attention_s=0.0, other_s=0.0,
                         tp_comm_s=0.0, fsdp_gather_s=0.0, grad_reduce_s=0.0, exposed_s=0.0, offload_exposed_s=0.0)


def test_pair_split_recovers_a_slower_mxu_and_nothing_else():
    # a world where every GEMM runs 1.3x its priced time and nothing else is missing: 10 s of GEMMs in a
    # 12 s step measures 15 s, 5 s of GEMMs in a 7 s step measures 8.5 s
    split = precision_pair_split(_step(15.0, 12.0, 10.0), _step(8.5, 7.0, 5.0))
    assert split.gemm_factor == pytest.approx(1.3)
    assert split.common_missing_s == pytest.approx(0.0, abs=1e-12)


def test_pair_split_puts_an_equal_deficit_outside_the_gemms():
    # both steps lack the same 4 s whatever their GEMM time: r = 1, U = 4 s
    split = precision_pair_split(_step(16.0, 12.0, 10.0), _step(11.0, 7.0, 5.0))
    assert split.gemm_factor == pytest.approx(1.0)
    assert split.common_missing_s == pytest.approx(4.0)


@pytest.mark.parametrize("a, b", [(_step(None, 12.0, 10.0), _step(8.5, 7.0, 5.0)),
                                  (_step(15.0, 12.0, 5.0), _step(8.5, 7.0, 5.0))])
def test_pair_split_needs_two_measured_steps_with_different_gemm_times(a, b):
    with pytest.raises(ValueError, match="r, r: "):
        precision_pair_split(a, b)


def test_gpt3_bf16_and_int8_rows_on_v6e_lack_time_outside_their_gemms():
    # train-126 (bf16, 17.18 s measured) and train-127 (AQT int8, 14.25 s) on v6e-256: the int8 step's GEMMs are
    # priced at half the bf16 ones and its quantisation (amax, casts, the gradients' stochastic-rounding noise) on
    # top; with the recompute pruned to what the backward reads (JAX's remat DCE) and the hidden FSDP collectives'
    # HBM traffic slowing the memory-bound ops beside them (0.14 s bf16, 0.95 s int8, whose quantisation fusions
    # are memory-bound) and the gradient reductions serial (XLA:TPU's defaults make no reduce-scatter asynchronous)
    # the two missing times read as a GEMM factor of about 1.22 (a lower sustained MXU clock, a worse tile
    # efficiency) plus 2.9 s both lack; what both lack still exceeds the bf16 step's FSDP all-gathers, the only
    # collectives the prediction still hides
    from simulator.parallel.maxtext_breakdown import maxtext_step_breakdown
    from simulator.parallel.training_validation import load_training_rows

    rows = {r.id: r for r in load_training_rows() if r.id in ("train-126", "train-127")}
    a, b = (maxtext_step_breakdown(rows[i]) for i in ("train-126", "train-127"))
    assert (a.measured_step_s, b.measured_step_s) == (pytest.approx(17.182), pytest.approx(14.245))
    split = precision_pair_split(a, b)
    assert split.gemm_factor == pytest.approx(1.22, abs=0.02)
    assert split.common_missing_s == pytest.approx(2.86, abs=0.05)
    assert split.common_missing_s > a.fsdp_gather_s


def test_v5e_64b_dcn_all_reduce_is_a_tenth_of_what_32_slices_lose():
    # train-083 (one v5e-256) and train-088 (32 of them over the data-centre network), MaxText 64B, FSDP 256 in
    # each slice: every chip all-reduces its bf16 gradient shard (64.8e9 parameters x 2 B / 256) with its 31
    # peers in a ring over its DCN share, 25 Gbit/s (2 x 100 Gbps NICs per 8-chip host, the v5e page):
    # 2 x 31/32 x 0.506 GB / 3.125 GB/s = 0.314 s, plus 62 net steps of 14 us; pipelined behind the backward
    # scan, only the last of the 65 units (64 layers + the embedding) is exposed. The measured step grows by
    # 2.66 s from one slice to 32: the all-reduce, even fully serial, is under an eighth of it
    from simulator.parallel.maxtext_breakdown import maxtext_step_breakdown
    from simulator.parallel.training_validation import load_training_rows

    rows = {r.id: r for r in load_training_rows() if r.id in ("train-083", "train-088")}
    one, many = (maxtext_step_breakdown(rows[i]) for i in ("train-083", "train-088"))
    assert (one.replicas_reduce_s, one.replicas_exposed_s) == (0.0, 0.0)
    ring = 2 * 31 / 32 * 64.8e9 * 2 / 256 / 3.125e9 + 62 * 14e-6
    assert many.replicas_reduce_s == pytest.approx(ring, rel=5e-3)
    assert many.replicas_exposed_s == pytest.approx(many.replicas_reduce_s / 65, rel=1e-6)
    assert many.grad_reduce_s - one.grad_reduce_s == pytest.approx(many.replicas_reduce_s, rel=1e-9)
    assert many.measured_step_s - one.measured_step_s == pytest.approx(2.66, abs=0.01)
    assert many.measured_step_s - one.measured_step_s > 8 * many.replicas_reduce_s


def _sliced(row_id: str, measured: float | None, dcn: float) -> StepBreakdown:
    return StepBreakdown(row_id=row_id, system="s", tokens_per_chip=1.0, measured_step_s=measured,
                         predicted_step_s=9.0, compute_s=9.0, gemm_s=8.0, attention_s=0.5, other_s=0.5,
                         tp_comm_s=0.0, fsdp_gather_s=1.0, grad_reduce_s=0.5, exposed_s=0.0, offload_exposed_s=0.0,
                         replicas_reduce_s=dcn)


def test_slice_loss_is_the_measured_growth_less_the_all_reduce_at_the_lower_rate():
    # 11.51 s on 32 slices against 10.30 s on one: 1.21 s lost, 37.8 ms for each of 32 scanned layers; a
    # 0.080 s all-reduce at a rate 1 / 0.329 times lower takes 0.2432 s, leaving 0.9668 s
    from simulator.parallel.maxtext_breakdown import slice_loss

    x = slice_loss(_sliced("b", 11.51, 0.080), _sliced("a", 10.30, 0.0), 32, 32, rate_ratio=1 / 0.329)
    assert (x.row_id, x.base_id, x.slices) == ("b", "a", 32)
    assert x.loss_s == pytest.approx(1.21)
    assert x.per_layer_s == pytest.approx(1.21 / 32)
    assert x.dcn_bound_s == pytest.approx(0.080 / 0.329)
    assert x.unexplained_s == pytest.approx(1.21 - 0.080 / 0.329)


@pytest.mark.parametrize(("multi", "one", "slices", "layers", "ratio", "message"), [
    (_sliced("b", None, 0.1), _sliced("a", 10.0, 0.0), 2, 32, 1.0, "b, a: a slice loss needs both measured steps"),
    (_sliced("b", 11.0, 0.1), _sliced("a", 10.0, 0.05), 2, 32, 1.0, "a: a cross-slice all-reduce of 0.05 s"),
    (_sliced("b", 11.0, 0.1), _sliced("a", 10.0, 0.0), 1, 32, 1.0, "b: slices=1, layers=32"),
    (_sliced("b", 11.0, 0.1), _sliced("a", 10.0, 0.0), 2, 0, 1.0, "b: slices=2, layers=0"),
    (_sliced("b", 11.0, 0.1), _sliced("a", 10.0, 0.0), 2, 32, 0.5, "rate_ratio=0.5; expected slices >= 2"),
])
def test_slice_loss_refuses_what_is_not_a_one_slice_pair(multi, one, slices, layers, ratio, message):
    from simulator.parallel.maxtext_breakdown import slice_loss

    with pytest.raises(ValueError, match=re.escape(message)):
        slice_loss(multi, one, slices, layers, ratio)


def test_v5e_128b_on_two_slices_loses_a_fifth_of_its_all_reduce_at_the_nic_rate():
    # MaxText's v5e table (76bd53b0f): the 128B at 56.06% MFU on one v5e-256 and 55.82% on two, the same work per
    # chip, so the step grows by 56.06 / 55.82 - 1 = 0.43%, 0.063 s of 14.61 s. The model's cross-slice all-reduce
    # of the chip's bf16 shard (129.2e9 parameters x 2 B / 256, 2 x 1/2 of it over 3.125 GB/s) is 0.323 s: serial,
    # even at the NICs' full rate, it would cost five times what the two slices lose, so it overlaps (the scripts'
    # DATA_PARALLEL_OVERLAP flags); a lower DCN rate only widens that gap
    from simulator.parallel.maxtext_breakdown import maxtext_step_breakdown, slice_loss
    from simulator.parallel.training_validation import load_training_rows

    rows = {r.id: r for r in load_training_rows() if r.id in ("train-089", "train-090")}
    one, two = (maxtext_step_breakdown(rows[i]) for i in ("train-089", "train-090"))
    x = slice_loss(two, one, 2, 64)
    assert x.loss_s == pytest.approx(one.measured_step_s * (56.06 / 55.82 - 1.0), rel=1e-9)
    assert x.loss_s == pytest.approx(0.063, abs=0.002)
    assert x.dcn_reduce_s == pytest.approx(129.2e9 * 2 / 256 / 3.125e9, rel=0.01)
    assert x.loss_s < x.dcn_reduce_s / 5

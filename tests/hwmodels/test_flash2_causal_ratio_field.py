"""``efficiency.flash2_causal_fwd_ratio``: FlashAttention-2's causal/non-causal forward rate ratio as a sourced device
field (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, Fig. 5(c)/(d), H100 80GB SXM5), what the GPU lowering
does with it, and its one calibration factor ``efficiency.flash2_causal_fwd_ratio_scale``."""

from __future__ import annotations

import dataclasses

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device
from hwmodels.spec import SpecError, replace_path

#: Fig. 5(d) over Fig. 5(c), the FlashAttention-2 bars, head dim 128: TFLOP/s causal / non-causal
PAPER = ((2048, 298 / 362), (4096, 319 / 368), (8192, 333 / 370), (16384, 335 / 370))
HOPPER = ("h100-sxm5-80gb", "h100-pcie-80gb", "h100-sxm5-96gb", "h200-sxm-141gb")


@pytest.mark.parametrize("name", HOPPER)
def test_hopper_boards_carry_the_measured_table(name: str) -> None:
    dev = load_device(name)
    assert dev.efficiency.flash2_causal_fwd_ratio == PAPER  # bit for bit: the quotients themselves
    assert dev.efficiency.flash2_causal_fwd_ratio_scale == 1.0
    src = dev.source_of("efficiency.flash2_causal_fwd_ratio")
    assert "Shah et al. 2024" in src.source and "Fig. 5(d)" in src.source and "hopper" in src.note


@pytest.mark.parametrize("name", ["a100-sxm4-80gb", "b200", "l4", "mi300x", "v100-sxm2-32gb"])
def test_other_devices_have_no_table_and_say_so(name: str) -> None:
    dev = load_device(name)
    assert dev.efficiency.flash2_causal_fwd_ratio == ()
    assert dev.source_of("efficiency.flash2_causal_fwd_ratio").source.startswith("not modelled: no measurement")
    assert gpu.flash2_causal_forward_ratio(8192, dev.efficiency.flash2_causal_fwd_ratio) == 1.0


def test_scale_multiplies_every_ratio_and_is_held_at_one() -> None:
    assert gpu.flash2_causal_forward_ratio(2048, PAPER, 0.9) == pytest.approx(0.9 * 298 / 362, rel=1e-15)
    assert gpu.flash2_causal_forward_ratio(65536, PAPER, 0.5) == pytest.approx(0.5 * 335 / 370, rel=1e-15)
    assert gpu.flash2_causal_forward_ratio(4096, PAPER, 1.2) == 1.0  # 1.2 x 0.867 = 1.04 -> 1


def _causal_forward_s(dev: object, seq: int = 4096, causal: bool = True) -> float:
    from simulator.engines.analytical import EvalOptions, evaluate
    from workloads.micro import build_micro

    g = build_micro(f"attention:b={16384 // seq},h=16,s={seq},d=128,causal={int(causal)}", dtype="bf16")
    return evaluate(g, dev, EvalOptions(attention_kernel="flash2")).latency_s


def test_lowering_reads_the_device_table() -> None:
    # with its table the causal forward is the non-causal one at the measured ratio, its CTAs' edges included (the
    # measured ratio holds them): the non-causal time x the visible share (about a half) / 0.867 at 4k
    h100 = load_device("h100-sxm5-80gb")
    assert _causal_forward_s(h100) == pytest.approx(_causal_forward_s(h100, causal=False) * 0.5 * 368 / 319, rel=0.01)
    # the same H100 without its table prices the causal forward at the non-causal pair rate plus the edges of its
    # CTAs (as many as the non-causal launch's, two co-resident an SM exposing one edge a round) and the whole
    # 64-key blocks its 128-row CTAs compute across the diagonal: the table makes it 1.106x slower at 4k (1 / 0.867
    # = 1.154 before the edges were priced, 1.127 with every CTA's edges exposed, 1.140 with the visible pairs
    # only; the attention kernel is compute-bound)
    bare = replace_path(h100, "efficiency", dataclasses.replace(h100.efficiency, flash2_causal_fwd_ratio=()))
    assert _causal_forward_s(h100) / _causal_forward_s(bare) == pytest.approx(1.106, rel=0.005)
    # the non-causal forward does not read it
    assert _causal_forward_s(h100, causal=False) == _causal_forward_s(bare, causal=False)
    # an A100 given the H100's table applies it: the table, not the architecture, switches it on
    a100 = load_device("a100-sxm4-80gb")
    a100t = replace_path(a100, "efficiency", dataclasses.replace(a100.efficiency, flash2_causal_fwd_ratio=PAPER))
    assert _causal_forward_s(a100t) == pytest.approx(_causal_forward_s(a100, causal=False) * 0.5 * 368 / 319, rel=0.01)
    assert _causal_forward_s(a100t) > 1.1 * _causal_forward_s(a100)


def test_calibration_fits_the_scale_within_its_default_bounds() -> None:
    from simulator.calibration import Calibrator
    from simulator.calibration.measurements import MeasurementSet

    h100 = load_device("h100-sxm5-80gb")
    truth = replace_path(h100, "efficiency.flash2_causal_fwd_ratio_scale", 0.8)
    rows = ["id,workload,dtype,device,median_s"]
    for i, seq in enumerate((1024, 2048, 4096, 8192, 16384)):
        rows.append(f'a{i},"attention:b={16384 // seq},h=16,s={seq},d=128,causal=1",bf16,h100-sxm5-80gb,'
                    f"{_causal_forward_s(truth, seq)!r}")
    ms = MeasurementSet.from_csv_text("\n".join(rows) + "\n", devices=["h100-sxm5-80gb"])

    def predict(graph, system) -> float:  # noqa: ANN001 - the calibrator's predict contract
        from simulator.engines.analytical import EvalOptions, evaluate

        return evaluate(graph, system, EvalOptions(attention_kernel="flash2")).latency_s

    cal = Calibrator(["efficiency.flash2_causal_fwd_ratio_scale"], predict=predict, regularization=0.0)
    cal.fit(ms, h100)
    # bounds: 0.5 up to the factor that takes the largest ratio (16k: 335/370) to 1
    assert cal.bounds_["efficiency.flash2_causal_fwd_ratio_scale"] == pytest.approx((0.5, 370 / 335))
    assert cal.params_["efficiency.flash2_causal_fwd_ratio_scale"] == pytest.approx(0.8, rel=1e-3)
    assert cal.after_.mape < 0.1 < cal.before_.mape


def test_calibrating_the_scale_of_a_device_without_a_table_is_refused() -> None:
    from simulator.calibration.fit import _params

    with pytest.raises(SpecError, match=r"calibration params: efficiency\.flash2_causal_fwd_ratio_scale: nothing to "
                                        r"scale on a100-sxm4-80gb; got an empty efficiency\.flash2_causal_fwd_ratio"):
        _params(["efficiency.flash2_causal_fwd_ratio_scale"], load_device("a100-sxm4-80gb"))
    with pytest.raises(SpecError, match=r"efficiency\.flash2_causal_fwd_ratio: not a numeric field"):
        _params(["efficiency.flash2_causal_fwd_ratio"], load_device("h100-sxm5-80gb"))


def test_hardware_show_lists_the_table_with_its_source() -> None:
    from hwmodels.catalog import describe

    text = describe(load_device("h100-sxm5-80gb"))
    line = next(ln for ln in text.splitlines() if "efficiency.flash2_causal_fwd_ratio " in ln)
    assert "2048: 0.8232, 4096: 0.8668, 8192: 0.9, 16384: 0.9054" in line and "Shah et al. 2024" in line
    assert "efficiency tables" not in describe(load_device("a100-sxm4-80gb"))

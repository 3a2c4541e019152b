"""``efficiency.flash2_causal_fwd_ratio_scale`` where it cannot act: calibration with explicit bounds on a device without
the table, an upper bound past the factor that takes the largest ratio to 1, an overlay or a sweep axis setting it
on a device without the table; and the table itself as a sweep axis. One located error each."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from hwmodels.loader import apply_overlay
from hwmodels.paths import SweepPathError, resolve_path, with_overrides
from hwmodels.spec import SpecError
from simulator.calibration.fit import _params

SCALE = "efficiency.flash2_causal_fwd_ratio_scale"
TABLE = "efficiency.flash2_causal_fwd_ratio"


@pytest.fixture(scope="module")
def a100():
    return load_device("a100-sxm4-80gb")


@pytest.fixture(scope="module")
def h100():
    return load_device("h100-sxm5-80gb")


def test_explicit_bounds_on_a_device_without_the_table_are_refused(a100):
    with pytest.raises(SpecError, match=rf"calibration params: {SCALE}: nothing to scale on a100-sxm4-80gb; "
                                        rf"got an empty {TABLE}"):
        _params({SCALE: (0.8, 1.1)}, a100)


def test_an_upper_bound_above_the_flat_point_is_refused(h100):
    most = 1.0 / max(r for _, r in h100.efficiency.flash2_causal_fwd_ratio)  # 1 / 0.9054... = 1.10448
    assert most == pytest.approx(370 / 335, rel=1e-12)
    with pytest.raises(SpecError, match=rf"{SCALE}: upper bound; got 1\.2; expected at most 1\.10448"):
        _params({SCALE: (0.8, 1.2)}, h100)
    with pytest.raises(SpecError, match=r"upper bound; got 1\.5"):
        _params({SCALE: (0.8, "x1.5")}, h100)
    (p,) = _params({SCALE: (0.8, 1.1)}, h100)
    assert (p.lower, p.upper) == (0.8, 1.1)


def test_an_overlay_setting_the_scale_without_a_table_is_refused(a100, h100):
    with pytest.raises(SpecError, match=rf"{SCALE}: nothing to scale on a100-sxm4-80gb: {TABLE} is empty.*got 1\.1"):
        apply_overlay(a100, {SCALE: 1.1}, source="test")
    assert apply_overlay(a100, {SCALE: 1.0}, source="test").efficiency.flash2_causal_fwd_ratio_scale == 1.0
    assert apply_overlay(h100, {SCALE: 1.05}, source="test").efficiency.flash2_causal_fwd_ratio_scale == 1.05


def test_a_sweep_axis_setting_the_scale_without_a_table_is_refused(a100):
    from simulator.engines.vectorized import variant_overrides

    with pytest.raises(SweepPathError, match=rf"a100-sxm4-80gb: {SCALE}: nothing to scale; got 1\.1"):
        with_overrides(a100, {SCALE: 1.1})
    with pytest.raises(SweepPathError, match=rf"{SCALE}: nothing to scale"):
        variant_overrides(a100, {SCALE: [1.0, 1.1]})
    assert with_overrides(a100, {SCALE: 1.0}).efficiency.flash2_causal_fwd_ratio_scale == 1.0


def test_the_table_as_a_sweep_axis_names_its_factor(h100):
    with pytest.raises(SweepPathError, match=rf"{TABLE}: a table \(rows\), not a numeric field; .*sweep its factor "
                                             rf"'{SCALE}' instead"):
        resolve_path(h100, TABLE)

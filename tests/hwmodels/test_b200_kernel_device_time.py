"""The B200's per-kernel device time from B200 kernels, not from a consumer Blackwell laptop.

aiconfigurator @ 095f58a51 times vLLM 0.24.0's bf16 -> fp8 cast (``static_scaled_fp8_quant``, 2 bytes read and 1
written an element) as 5 calls a CUDA-graph replay on a B200, an H100 and an H200
(``<system>/quantize/vllm/0.24.0/scale_matrix_perf.parquet``). Its 315 rows moving <= 100 kB take a median 2.181 us
a kernel on the B200 (2.043 on the H100, 1.962 on the H200); less the modelled work of such a kernel (DRAM latency
plus the half-size bytes at the streaming rate) that is 1.557 us on the B200, 1.188 on the H100 and 1.260 on the
H200, where the catalog's independent no-work kernel figures are 1.3 us (Hazy Research, H100) and 1.26 us (RRZE
gpu-small-kernels, H200). The rows below are single rows of the same tables (m, k, ms).
"""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from hwmodels.gpu import gpu_params, streaming

#: (m, k, latency in ms) of the B200 and H100 cast tables, 6.3 MB, 25 MB and 101 MB moved
B200_ROWS = ((1024, 2048, 0.00300907), (4096, 2048, 0.006272), (8192, 4096, 0.01812907))
H100_ROWS = ((1024, 2048, 0.00313387), (4096, 2048, 0.00634133), (8192, 4096, 0.0358272))

#: median whole time of the <= 100 kB rows (us) and the median of (row time - modelled work) (us), per GPU
SMALL_ROWS_US = {"b200": (2.181, 1.557), "h100-sxm5-80gb": (2.043, 1.188), "h200-sxm-141gb": (1.962, 1.260)}


def _cast_s(name: str, m: int, k: int, device_time_s: float | None = None) -> float:
    """Modelled time of one m x k cast: its stream plus the device's per-kernel time (or the one given)."""
    dev = load_device(name)
    est = streaming(2 * m * k, m * k, 0.0, gpu_params(dev, "bf16"))
    extra = dev.efficiency.kernel_device_time_s if device_time_s is None else device_time_s
    return est.time_s + extra


def test_the_b200_field_is_the_small_rows_less_their_modelled_work():
    b200 = load_device("b200")
    whole_us, rest_us = SMALL_ROWS_US["b200"]
    work_us = 834 / 1.856e3 + 1.16e6 / (0.850 * 8e12) * 1e6  # DRAM latency + half-size bytes: 0.449 + 0.171
    assert whole_us - work_us == pytest.approx(rest_us, abs=0.01)
    assert b200.efficiency.kernel_device_time_s == pytest.approx(1.56e-6, rel=1e-9)
    assert b200.efficiency.graph_launch_overhead_s == pytest.approx(1.56e-6, rel=1e-9)
    prov = b200.provenance["efficiency.kernel_device_time_s"]
    assert "aiconfigurator @ 095f58a51" in prov.source and "b200_sxm/quantize/vllm/0.24.0" in prov.source


def test_the_same_derivation_gives_the_hopper_no_work_kernels():
    """On the H100 and H200 the derivation lands on the catalog's independent figures (within 10%)."""
    for name in ("h100-sxm5-80gb", "h200-sxm-141gb"):
        assert SMALL_ROWS_US[name][1] * 1e-6 == pytest.approx(load_device(name).efficiency.kernel_device_time_s, rel=0.10)
    assert SMALL_ROWS_US["b200"][1] > 1.2 * SMALL_ROWS_US["h200-sxm-141gb"][1]


@pytest.mark.parametrize(("m", "k", "ms"), B200_ROWS)
def test_b200_mid_sized_casts_are_within_seven_percent(m, k, ms):
    """6-101 MB casts: within 7% with the B200 figure; 12-30% fast with the laptop's 0.58 us."""
    assert _cast_s("b200", m, k) == pytest.approx(ms * 1e-3, rel=0.07)
    assert _cast_s("b200", m, k, device_time_s=0.58e-6) < 0.89 * ms * 1e-3


@pytest.mark.parametrize(("m", "k", "ms"), H100_ROWS)
def test_h100_control_is_not_fast_at_the_same_sizes(m, k, ms):
    """The H100, priced with its own 1.3 us, is not fast at the two small sizes where the B200 was (30% and 58%
    slow). At 8192 x 4096 (100 MB) it is 5.5% fast: the streaming figure is now gpu-stream's triad (0.946 of the
    GH200's HBM3), above this cast's own 0.905 of 3.35 TB/s (with MT4G's read test, 0.821, it was slower)."""
    if m * k >= 8192 * 4096:
        assert _cast_s("h100-sxm5-80gb", m, k) == pytest.approx(0.945 * ms * 1e-3, rel=0.01)
    else:
        assert _cast_s("h100-sxm5-80gb", m, k) > 1.25 * ms * 1e-3

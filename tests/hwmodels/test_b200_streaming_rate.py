"""The B200 streams at a Blackwell measurement, not at the H100's MT4G read figure.

``efficiency.dram_bandwidth_fraction`` of the Blackwell section is vLLM 0.24.0's bf16 -> fp8 cast
(``static_scaled_fp8_quant``, plain vectorized loads) timed on a B200 by aiconfigurator @ 095f58a51
(``b200_sxm/quantize/vllm/0.24.0/scale_matrix_perf.parquet``): the four rows moving 2.5-6.4 GB run at
6.79, 6.75, 6.85 and 6.81 TB/s, median 6.80 TB/s = 0.850 of 8 TB/s (docs/accuracy.md, "The B200's streaming
rate from Blackwell measurements"). Hopper keeps MT4G's read figure (0.821).
"""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from hwmodels.gpu import gpu_params, streaming
from simulator.engines.analytical import EvalOptions, evaluate
from workloads.micro import build_micro

#: (m, k, latency in ms) of the four largest rows of the vLLM 0.24.0 B200 cast table
CAST_ROWS = ((16384, 51200, 0.370588), (16384, 65536, 0.477089), (32768, 51200, 0.734708), (32768, 65536, 0.945351))


@pytest.fixture(scope="module")
def b200():
    return load_device("b200")


def test_field_is_the_median_of_the_cast_rows_and_carries_its_source(b200):
    rates = sorted(3 * m * k / (ms * 1e-3) for m, k, ms in CAST_ROWS)
    median = (rates[1] + rates[2]) / 2
    assert median == pytest.approx(6.803e12, rel=1e-3)
    assert b200.efficiency.dram_bandwidth_fraction == pytest.approx(median / 8e12, abs=5e-4)  # 0.850
    prov = b200.provenance["efficiency.dram_bandwidth_fraction"]
    assert "aiconfigurator @ 095f58a51" in prov.source and "static_scaled_fp8_quant" in prov.source
    assert "B200" in prov.source and "scale_matrix_perf.parquet" in prov.source
    assert "MT4G" in prov.note  # says which mechanism the Hopper figure measures instead
    # the Hopper default is gpu-stream's triad on the GH200's HBM3 (3783 / 4000 GB/s), no longer MT4G's 0.821
    assert load_device("h100-sxm5-80gb").efficiency.dram_bandwidth_fraction == pytest.approx(3783 / 4000, abs=5e-4)


def test_a_b200_stream_of_n_bytes_takes_n_over_fraction_times_peak(b200):
    p = gpu_params(b200, "bf16")
    m, k = 32768, 65536
    est = streaming(2 * m * k, m * k, 0.0, p)
    n = 3 * m * k
    half = 1.16e6  # bandwidth_half_size_bytes (Hopper's Little's-law figure, assumed for Blackwell)
    lat = 834 / 1.856e9  # main memory latency 834 cycles at the catalog clock
    assert est.memory_s == pytest.approx((n + half) / (0.850 * 8e12), rel=1e-9)
    assert est.time_s == pytest.approx((n + half) / (0.850 * 8e12) + lat, rel=1e-9)
    # the 6.44 GB row it was derived from: 0.948 ms against 0.945 measured
    assert est.time_s == pytest.approx(0.945351e-3, rel=0.01)


def test_an_elementwise_op_is_priced_at_the_fraction(b200):
    """One int8 scale of 2^28 elements (read + write 2^29 bytes) through the whole engine."""
    rec = evaluate(build_micro("elementwise:numel=268435456,op=scale", "int8"), b200, EvalOptions()).records[0]
    n = 2 ** 29
    by_hand = (n + 1.16e6) / (0.850 * 8e12) + 834 / 1.856e9 + 1.56e-6  # + the B200's per-kernel device time
    assert rec.bound == "memory"
    assert rec.time_s == pytest.approx(by_hand, rel=1e-6)  # 81.13 us (83.93 us at the H100's 0.821)

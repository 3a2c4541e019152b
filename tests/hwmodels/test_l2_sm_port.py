"""A GEMM grid that leaves SMs idle: its operand panels load at min(tile rate, busy SMs x one SM's intake).

``efficiency.l2_tile_sm_port_ratio`` is one SM's L2 tile intake while other SMs idle, over its even share of the
tile rate. On Hopper the catalog's tile rate is MT4G's plain-load read (4529 GiB/s), and RRZE's ``gpu-l2-cache``
has all 132 SMs of a GH100 take in 9.92 TB/s (h200.txt @ 1038c5d, median over 4-32 MB), so each SM takes in at
least 9.92 TB/s / 132 = 75.2 GB/s: a ratio of 2.040. Worked by hand below on the H100 SXM.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device
from hwmodels.spec import SpecError

SMS = 132
CLOCK_HZ = 1980e6  # the catalog's cycle-to-second basis for MT4G's latencies
L2_BYTES_PER_S = 4529 * 2**30  # MT4G H100 SXM L2 read, 4529 GiB/s (the Hopper tile rate)
RRZE_BYTES_PER_S = 9.9185e12  # gpu-l2-cache/h200.txt @ 1038c5d: median of the 26 sizes from 4 to 32 MB
PORT_RATIO = RRZE_BYTES_PER_S / L2_BYTES_PER_S
RATE_SM = 989.4e12 * 0.78 / SMS  # dense bf16 tensor peak x tensor_peak_fraction, per SM
DRAM_LATENCY_S = 834 / CLOCK_HZ
L2_LATENCY_S = 219 / CLOCK_HZ


@pytest.fixture(scope="module")
def params() -> gpu.GpuParams:
    return gpu.gpu_params(load_device("h100-sxm5-80gb"), "bf16")


def test_catalog_ratio_is_rrze_over_mt4g(params):
    assert PORT_RATIO == pytest.approx(2.040, abs=5e-4)
    assert float(params.l2_port_ratio) == pytest.approx(PORT_RATIO, abs=5e-4)
    assert float(gpu.gpu_params(load_device("h100-pcie-80gb"), "bf16").l2_port_ratio) == pytest.approx(
        6.98825e12 / 3.723e12, abs=5e-4)  # h100_pcie.txt: median 6988.25 GB/s over the MT4G-scaled 3.723 TB/s
    for name in ("a100-sxm4-80gb", "b200", "l40s"):  # no per-SM figure: a CTA keeps its share
        assert float(gpu.gpu_params(load_device(name), "bf16").l2_port_ratio) == 1.0


def test_partial_wave_gemm_by_hand(params):
    # 512 x 512 x 512 bf16: 64 CTAs of 64 x 64 x 64 (no cluster), one per SM, 68 SMs idle
    p = dataclasses.replace(params, l2_port_ratio=PORT_RATIO)
    e = gpu.gemm(512, 512, 512, p, gpu.tile_candidates("hopper", True, 2.0))
    assert str(e.tile) == "64x64x64_s10" and int(e.split_k) == 1 and int(e.ctas) == 64
    per_cta = (64 + 64) * 512 * 2 + 64 * 64 * 2  # A and B panels over K, and the C tile: 139,264 B
    share = SMS / L2_BYTES_PER_S  # s per byte at one SM's share of the tile rate
    held = per_cta * share  # every CTA held to its share: 3.78 us
    whole = 64 * per_cta / L2_BYTES_PER_S  # the grid's traffic at the whole tile rate: 1.83 us
    port = per_cta * share / PORT_RATIO  # one CTA at one SM's intake: 1.85 us
    assert held == pytest.approx(3.780e-6, rel=1e-3)
    assert whole == pytest.approx(1.833e-6, rel=1e-3) and port == pytest.approx(1.853e-6, rel=1e-3)
    assert float(e.memory_s) == pytest.approx(max(whole, port), rel=1e-9) and e.bound_term == "l2"
    # serial: the prologue (one DRAM latency) and one round of edges: the C tile into L2 at the share (a write) plus
    # one L2 latency, and the cheaper of the first slice's load (a read, at the 64 busy SMs' intake: one SM's port,
    # their split of the tile rate, 132 / 64 = 2.06 shares, being above it) and the last slice's math (the cheaper)
    c_store = 64 * 64 * 2 * share + L2_LATENCY_S
    first_load = (64 + 64) * 64 * 2 * share / PORT_RATIO
    last_math = 2 * 64 * 64 * 64 / RATE_SM
    assert last_math < first_load
    edge = c_store + min(first_load, last_math)
    assert float(e.latency_s) == pytest.approx(DRAM_LATENCY_S + edge, rel=1e-6)
    assert float(e.edge_s) == pytest.approx(edge, rel=1e-6)
    assert float(e.time_s) == pytest.approx(max(whole, port) + DRAM_LATENCY_S + edge, rel=1e-6)
    assert float(e.time_s) == pytest.approx(2.697e-6, rel=1e-3)
    # held to the share, the same GEMM splits K in two (128 CTAs) and takes 4.62 us
    held_e = gpu.gemm(512, 512, 512, dataclasses.replace(params, l2_port_ratio=1.0),
                      gpu.tile_candidates("hopper", True, 2.0))
    assert int(held_e.split_k) == 2 and float(held_e.time_s) == pytest.approx(4.623e-6, rel=1e-3)


def test_full_waves_keep_the_share(params):
    # 4096^3: 256 CTAs of 128 x 256 fill two waves (one partial: 124 of 132 SMs): the port only trims the last
    cands = gpu.tile_candidates("hopper", True, 2.0)
    launch = gpu.gemm_launch(4096, 4096, 4096, cands)
    share = SMS / L2_BYTES_PER_S
    busiest = np.ceil(launch.ctas / SMS)
    held = gpu.gemm_l2_panels_s(launch, busiest, share)
    port = gpu.gemm_l2_port_s_per_byte(dataclasses.replace(params, l2_port_ratio=PORT_RATIO))
    got = gpu.gemm_l2_panels_s(launch, busiest, share, SMS, port)
    per_cta = gpu.gemm_l2_bytes_per_cta(launch)
    want = np.minimum(busiest * per_cta * share, np.maximum(launch.ctas * per_cta / L2_BYTES_PER_S,
                                                            (busiest - 1) * per_cta * share + per_cta * share / PORT_RATIO))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.all(got <= held)
    full = launch.ctas % SMS == 0  # whole waves: the share stands
    np.testing.assert_allclose(got[full], held[full], rtol=1e-12)
    # no figure (ratio 1): exactly the share
    assert np.all(np.isinf(gpu.gemm_l2_port_s_per_byte(dataclasses.replace(params, l2_port_ratio=1.0))))


def test_ratio_below_one_is_refused():
    dev = load_device("h100-sxm5-80gb")
    bad = dataclasses.replace(dev, efficiency=dataclasses.replace(dev.efficiency, l2_tile_sm_port_ratio=0.5))
    with pytest.raises(SpecError, match="l2_tile_sm_port_ratio"):
        gpu.gpu_params(bad, "bf16")


def test_split_k_hand_offs_read_at_the_port(params):
    # 1024 x 1024 x 4096 bf16 (the shape of pub-120): 64 output tiles of 128 x 128 split in two, 128 CTAs on 132 SMs.
    # A hand-off reads the partner's fp32 tile and writes the sum; one CTA per output tile does it, so 64 SMs read
    # together, each at one SM's intake (2.040 shares: their split of the tile rate, 132 / 64 = 2.06 shares, is above
    # it); the write stays at the share (the ratio is a read figure).
    e = gpu.gemm(1024, 1024, 4096, dataclasses.replace(params, l2_port_ratio=PORT_RATIO),
                 gpu.tile_candidates("hopper", True, 2.0))
    assert str(e.tile).startswith("128x128x64") and int(e.split_k) == 2 and int(e.ctas) == 128
    share = SMS / L2_BYTES_PER_S
    tile_bytes = 128 * 128 * 4  # one fp32 tile: 65,536 B read, 65,536 B written
    fixup = tile_bytes * share / PORT_RATIO + tile_bytes * share + 2 * L2_LATENCY_S
    assert float(e.fixup_s) == pytest.approx(fixup, rel=1e-6)
    assert float(e.fixup_s) == pytest.approx(2.872e-6, rel=1e-3)  # 3.78 us with the read at the share
    # the busy-SM rate by hand: every SM busy keeps the share; no figure (ratio 1) keeps it however few are busy
    assert float(gpu.gemm_busy_l2_s_per_byte(share, SMS, 132, PORT_RATIO)) == pytest.approx(share, rel=1e-12)
    assert float(gpu.gemm_busy_l2_s_per_byte(share, SMS, 100, PORT_RATIO)) == pytest.approx(share * 100 / SMS)
    assert float(gpu.gemm_busy_l2_s_per_byte(share, SMS, 16, PORT_RATIO)) == pytest.approx(share / PORT_RATIO)
    assert float(gpu.gemm_busy_l2_s_per_byte(share, SMS, 16, 1.0)) == share

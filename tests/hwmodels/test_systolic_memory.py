"""The double-buffered scratchpad / DRAM model of hwmodels.systolic: hand cases, properties, and the
worked example of its docstring, including what SCALE-Sim's USER mode reports for it."""

from __future__ import annotations

import os

import numpy as np
import pytest
from scalesim_oracle import VENV_HINT, ScaleSimUnavailable, run_scalesim, scalesim_python

from hwmodels.systolic import gemm_cycles


def test_worked_example() -> None:
    # 64^3 GEMM, 8x8 output stationary, 1024-word scratchpads, 10 words/cycle
    r = gemm_cycles(8, 8, "os", 64, 64, 64, sram_words=(1024, 1024, 1024), dram_words_per_cycle=10)
    assert int(r.compute_cycles) == 64 * 78 - 1 == 4991
    assert int(r.dram_ifmap_reads) == 4096 * 8  # 4096-word ifmap > 1024: once per column fold
    assert int(r.dram_filter_reads) == 4096  # each 64x8 tile (512 words) fits: read once
    assert int(r.dram_ofmap_writes) == 4096
    assert int(r.memory_cycles) == 4096  # 40960 words / 10
    assert (int(r.prefetch_cycles), int(r.drain_cycles), int(r.stall_cycles)) == (0, 7, 0)
    assert int(r.total_cycles) == 4998
    assert str(r.bound) == "compute"


def test_ideal_memory_is_compute_only() -> None:
    r = gemm_cycles(16, 16, "ws", 300, 200, 150)
    assert int(r.total_cycles) == int(r.compute_cycles)
    assert int(r.stall_cycles) == int(r.prefetch_cycles) == int(r.drain_cycles) == 0
    # unbounded scratchpads: compulsory traffic only
    assert int(r.dram_ifmap_reads) == 300 * 150
    assert int(r.dram_filter_reads) == 150 * 200
    assert int(r.dram_ofmap_writes) == 300 * 200
    assert int(r.dram_ofmap_reads) == 0


def test_partial_sums_spill_when_the_block_does_not_fit() -> None:
    # ws: K=150 on 16 rows -> 10 row folds; the M x C = 300 x 16 partial-sum block is 4800 words
    fits = gemm_cycles(16, 16, "ws", 300, 200, 150, sram_words=(10**6, 10**6, 4800))
    spills = gemm_cycles(16, 16, "ws", 300, 200, 150, sram_words=(10**6, 10**6, 4799))
    assert (int(fits.dram_ofmap_writes), int(fits.dram_ofmap_reads)) == (60000, 0)
    assert (int(spills.dram_ofmap_writes), int(spills.dram_ofmap_reads)) == (600000, 540000)


def test_input_stationary_rereads_filter_per_column_fold() -> None:
    # is: filter (K x N = 3000 words) swept by the inner loop, re-read for each of ceil(M/C) folds
    fits = gemm_cycles(8, 8, "is", 20, 100, 30, sram_words=(10**6, 3000, 10**6))
    small = gemm_cycles(8, 8, "is", 20, 100, 30, sram_words=(10**6, 2999, 10**6))
    assert int(fits.dram_filter_reads) == 3000
    assert int(small.dram_filter_reads) == 3000 * 3
    assert int(small.prefetch_cycles) == 0  # no bandwidth given: ideal memory


def test_memory_bound_layer() -> None:
    # os on a 1-fold GEMM with 1 word/cycle: traffic 3 * 64 * 64 words >> 190 compute cycles
    r = gemm_cycles(64, 64, "os", 64, 64, 64, dram_words_per_cycle=1)
    assert str(r.bound) == "memory"
    assert int(r.drain_cycles) == 4096
    assert int(r.stall_cycles) == 8192 - int(r.compute_cycles)
    assert int(r.total_cycles) == 8192 + 4096


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_more_bandwidth_or_sram_never_slower(dataflow: str) -> None:
    bws = np.array([0.5, 1, 2, 4, 8, 16, 64, np.inf])
    r = gemm_cycles(16, 16, dataflow, 200, 120, 90, sram_words=(2048, 2048, 2048),
                    dram_words_per_cycle=bws)
    assert np.all(np.diff(r.total_cycles) <= 0)
    sizes = np.array([256, 1024, 4096, 16384, 65536])
    s = gemm_cycles(16, 16, dataflow, 200, 120, 90, sram_words=(sizes, sizes, sizes),
                    dram_words_per_cycle=4)
    traffic = s.dram_ifmap_reads + s.dram_filter_reads + s.dram_ofmap_writes + s.dram_ofmap_reads
    assert np.all(np.diff(traffic) <= 0)
    assert np.all(np.diff(s.total_cycles) <= 0)


def test_scalesim_user_mode_on_the_worked_example() -> None:
    """What the docstring says SCALE-Sim reports for the worked example (USER mode)."""
    try:
        scalesim_python()
    except ScaleSimUnavailable as exc:
        if os.environ.get("NODEPERF_ALLOW_SKIP_SCALESIM") == "1":
            pytest.skip(str(exc))
        pytest.fail(f"{exc}. Create the venv ({VENV_HINT}).")
    (layer,), _ = run_scalesim(8, 8, "os", [("g", 64, 64, 64)], gemm=True, sram_kib=(1, 1, 1),
                               bandwidth_words_per_cycle=10)
    assert layer.total_cycles == 23992
    assert layer.stall_cycles == 19001
    assert layer.total_cycles - layer.stall_cycles == 4991  # its compute cycles equal ours
    assert layer.dram_filter_reads == 235560

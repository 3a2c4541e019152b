"""The closed forms of hwmodels.systolic against a cycle-stepped array that moves operands PE to PE."""

from __future__ import annotations

import numpy as np
import pytest
from systolic_reference import simulate

from hwmodels.systolic import gemm_cycles


def _random_cases(seed: int, count: int) -> list[tuple[int, int, int, int, int]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        rows, cols = (int(x) for x in rng.integers(4, 17, 2))
        m, n, k = (int(x) for x in rng.integers(1, 41, 3))
        cases.append((rows, cols, m, n, k))
    # hand-picked edges: exact multiples, one-element dimensions, deep K
    cases += [(4, 4, 8, 8, 8), (16, 16, 1, 1, 1), (4, 16, 17, 3, 33), (16, 4, 3, 17, 5)]
    return cases


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("case", _random_cases(seed=0, count=16))
def test_closed_forms_match_stepped_array(dataflow: str, case: tuple[int, int, int, int, int]) -> None:
    rows, cols, m, n, k = case
    rng = np.random.default_rng(hash(case) % 2**32)
    a = rng.integers(-7, 8, (m, k))
    b = rng.integers(-7, 8, (k, n))
    ref = simulate(rows, cols, dataflow, a, b)
    got = gemm_cycles(rows, cols, dataflow, m, n, k)

    np.testing.assert_array_equal(ref.output, a @ b)  # the stepped array really computes the GEMM
    assert int(got.folds) == ref.folds
    assert set(ref.fold_lengths) == {int(got.fold_cycles)}
    assert int(got.preload_cycles) == sum(ref.fold_preload)
    assert int(got.preload_cycles + got.skew_cycles + got.stream_cycles) == ref.cycles
    assert int(got.compute_cycles) == ref.cycles - 1  # SCALE-Sim reports the last cycle's index
    assert int(got.macs) == sum(ref.fold_macs) == m * n * k
    assert int(got.sram_ifmap_reads) == ref.ifmap_reads
    assert int(got.sram_filter_reads) == ref.filter_reads
    assert int(got.sram_ofmap_reads) == ref.ofmap_reads
    bookkeeping = int(got.folds) * (rows + cols) if dataflow == "os" else 0
    assert int(got.sram_ofmap_writes) - bookkeeping == ref.ofmap_writes

    pes = rows * cols
    mapping = 100 * np.mean(np.array(ref.fold_active_pes) / pes)
    # SCALE-Sim's compute-utilisation window: the fold for os, the fold plus cols - 1 for ws/is
    window = np.array(ref.fold_lengths) + (0 if dataflow == "os" else cols - 1)
    compute = 100 * np.mean(np.array(ref.fold_macs) / (pes * window))
    overall = 100 * m * n * k / ((ref.cycles - 1) * pes)
    assert float(got.mapping_eff_pct) == pytest.approx(mapping, rel=1e-12)
    assert float(got.compute_util_pct) == pytest.approx(compute, rel=1e-12)
    assert float(got.overall_util_pct) == pytest.approx(overall, rel=1e-12)

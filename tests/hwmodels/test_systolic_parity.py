"""Parity of hwmodels.systolic with SCALE-Sim v3 (scalesim==3.0.0), which each case runs as a subprocess.

Three topologies (convolutions with partial folds, GEMMs, strided / non-square / depthwise
convolutions) x three dataflows x two array sizes. Compared exactly: SCALE-Sim's "Total Cycles"
and "Stall Cycles" (CALC mode: no stalls), its three utilisation figures (bit for bit, with
SCALE-Sim's fold-by-fold averaging) and its SRAM ifmap/filter reads and ofmap writes. Its "Total
Cycles (incl. prefetch)" comes from its own DRAM prefetch estimate and is not a compute figure; our
memory model replaces it (see hwmodels.systolic).

The SCALE-Sim interpreter is found as described in scalesim_oracle.scalesim_python(); when it is
missing these tests fail unless NODEPERF_ALLOW_SKIP_SCALESIM=1.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from scalesim_oracle import VENV_HINT, ScaleSimUnavailable, run_scalesim, scalesim_python

from hwmodels.systolic import gemm_cycles
from hwmodels.topology import read_topology

DATA = Path(__file__).parent / "data"
TOPOLOGIES = {
    "parity_cnn.csv": False,
    "parity_gemm.csv": True,
    "parity_strided.csv": False,
}


@pytest.fixture(scope="module")
def scalesim_available() -> None:
    try:
        scalesim_python()
    except ScaleSimUnavailable as exc:
        if os.environ.get("NODEPERF_ALLOW_SKIP_SCALESIM") == "1":
            pytest.skip(str(exc))
        pytest.fail(f"{exc}. Parity with SCALE-Sim is required; create the venv ({VENV_HINT}).")


def _ours(path: Path, rows: int, dataflow: str, fold_average: str):
    topo = read_topology(path)
    a = topo.gemm_arrays()
    return topo, gemm_cycles(
        rows, rows, dataflow, a["m"], a["n"], a["k"], ifmap_words=a["ifmap_words"],
        fold_average=fold_average,
    )


@pytest.mark.parametrize("size", [32, 128])
@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_matches_scalesim(scalesim_available: None, topology: str, dataflow: str, size: int) -> None:
    path = DATA / topology
    theirs, _ = run_scalesim(size, size, dataflow, path, gemm=TOPOLOGIES[topology])
    topo, ours = _ours(path, size, dataflow, "scalesim")
    _, exact = _ours(path, size, dataflow, "exact")
    assert len(theirs) == len(topo.layers)
    # the cases must exercise partial folds
    assert np.any(ours.sr % size != 0) and np.any(ours.folds > 1)
    for i, (layer, s) in enumerate(zip(topo.layers, theirs, strict=True)):
        where = f"{topology} {dataflow} {size}x{size} {layer.name}"
        assert int(ours.compute_cycles[i]) == s.total_cycles, where
        assert int(ours.total_cycles[i]) == s.total_cycles, where
        assert int(ours.stall_cycles[i]) == s.stall_cycles == 0, where
        assert float(ours.overall_util_pct[i]) == s.overall_util_pct, where
        assert float(ours.mapping_eff_pct[i]) == s.mapping_eff_pct, where
        assert float(ours.compute_util_pct[i]) == s.compute_util_pct, where
        assert int(ours.sram_ifmap_reads[i]) == s.sram_ifmap_reads, where
        assert int(ours.sram_filter_reads[i]) == s.sram_filter_reads, where
        assert int(ours.sram_ofmap_writes[i]) == s.sram_ofmap_writes, where
        # the exact-ratio averaging differs from SCALE-Sim's running sum by rounding only
        assert float(exact.mapping_eff_pct[i]) == pytest.approx(s.mapping_eff_pct, rel=1e-13)
        assert float(exact.compute_util_pct[i]) == pytest.approx(s.compute_util_pct, rel=1e-13)

"""Runs SCALE-Sim v3 (scalesim==3.0.0, its own virtual environment) as a subprocess and reads its reports.

Used by the parity tests and by ``benchmarks/bench_systolic.py``. SCALE-Sim is driven through its
Python API with trace saving off (``save_disk_space=True``), in a temporary folder; the compute and
memory simulation it runs is the same as its command line's.
"""

from __future__ import annotations

import csv
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = REPO_ROOT / ".scalesim-venv" / "bin" / "python"

# Venv creation, recorded for CI:
#   python -m venv .scalesim-venv
#   .scalesim-venv/bin/pip install scalesim==3.0.0 'numpy<2.4'
VENV_HINT = (
    "python -m venv .scalesim-venv && "
    ".scalesim-venv/bin/pip install scalesim==3.0.0 'numpy<2.4'"
)

_DRIVER = """
import sys
from scalesim.scale_sim import scalesim
cfg, topo, layout, out, kind = sys.argv[1:6]
sim = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout,
               input_type_gemm=(kind == "gemm"))
sim.run_scale(top_path=out)
"""

_CONFIG = """[general]
run_name = parity

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
ifmapsramszkB = {ifmap_kib}
filtersramszkB = {filter_kib}
ofmapsramszkB = {ofmap_kib}
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Dataflow = {dataflow}
Bandwidth = {bandwidth}
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = {bandwidth}
IfmapSRAMBankNum = 1
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = {bandwidth}
FilterSRAMBankNum = 1
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40

[run_presets]
InterfaceBandwidth = {mode}
UseRamulatorTrace = False
"""


class ScaleSimUnavailable(RuntimeError):
    """The SCALE-Sim interpreter is missing."""


def scalesim_python() -> Path:
    """Interpreter of the SCALE-Sim venv: $NODEPERF_SCALESIM_PYTHON when set, else ``.scalesim-venv``
    in the repository root; raises ScaleSimUnavailable when it does not exist."""
    env = os.environ.get("NODEPERF_SCALESIM_PYTHON")
    candidates = [Path(env)] if env else [DEFAULT_PYTHON]
    for c in candidates:
        if c.is_file():
            return c
    raise ScaleSimUnavailable(
        f"SCALE-Sim interpreter not found (tried {', '.join(map(str, candidates))}); "
        f"create it with: {VENV_HINT}, or set NODEPERF_SCALESIM_PYTHON"
    )


@dataclass(frozen=True)
class ScaleSimLayer:
    """One row of SCALE-Sim's COMPUTE_REPORT and DETAILED_ACCESS_REPORT (raw strings kept)."""

    total_cycles_incl_prefetch: int
    total_cycles: int
    stall_cycles: int
    overall_util_pct: float
    mapping_eff_pct: float
    compute_util_pct: float
    sram_ifmap_reads: int
    sram_filter_reads: int
    sram_ofmap_writes: int
    dram_ifmap_reads: int
    dram_filter_reads: int
    dram_ofmap_writes: int
    raw_compute: tuple[str, ...]


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        rows = [[c.strip() for c in r] for r in csv.reader(f)]
    return [r[:-1] if r and r[-1] == "" else r for r in rows[1:] if r]


def run_scalesim(
    rows: int,
    cols: int,
    dataflow: str,
    topology: Path | str | Sequence[Sequence[object]],
    *,
    gemm: bool,
    sram_kib: tuple[int, int, int] = (64, 64, 64),
    bandwidth_words_per_cycle: int | None = None,
    timeout_s: float = 600.0,
) -> tuple[list[ScaleSimLayer], float]:
    """Run SCALE-Sim on ``layers`` and return its per-layer figures and its wall time (s).

    Parameters
    ----------
    topology
        A topology CSV file (copied as is), or rows without the trailing comma:
        ``(name, M, N, K)`` when ``gemm`` else ``(name, H, W, R, S, C, filters, stride)``.
    bandwidth_words_per_cycle
        ``None``: CALC mode (SCALE-Sim's default, no stalls); else USER mode at this bandwidth.
    """
    py = scalesim_python()
    with tempfile.TemporaryDirectory(prefix="scalesim-") as tmp:
        d = Path(tmp)
        (d / "scale.cfg").write_text(
            _CONFIG.format(
                rows=rows,
                cols=cols,
                dataflow=dataflow,
                ifmap_kib=sram_kib[0],
                filter_kib=sram_kib[1],
                ofmap_kib=sram_kib[2],
                bandwidth=bandwidth_words_per_cycle or 10,
                mode="CALC" if bandwidth_words_per_cycle is None else "USER",
            )
        )
        if isinstance(topology, (str, Path)):
            (d / "topo.csv").write_text(Path(topology).read_text())
        else:
            header = "Layer name, M, N, K," if gemm else (
                "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
                "Num Filter, Strides,"
            )
            lines = [header] + [", ".join(str(x) for x in layer) + "," for layer in topology]
            (d / "topo.csv").write_text("\n".join(lines) + "\n")
        (d / "layout.csv").write_text("Layer name,\n")
        (d / "driver.py").write_text(_DRIVER)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(py), "driver.py", "scale.cfg", "topo.csv", "layout.csv", "out",
             "gemm" if gemm else "conv"],
            cwd=d,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        wall_s = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"SCALE-Sim failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
        comp = _rows(d / "out/parity/COMPUTE_REPORT.csv")
        det = _rows(d / "out/parity/DETAILED_ACCESS_REPORT.csv")
    out = []
    for c, a in zip(comp, det, strict=True):
        out.append(
            ScaleSimLayer(
                total_cycles_incl_prefetch=int(c[1]),
                total_cycles=int(c[2]),
                stall_cycles=int(c[3]),
                overall_util_pct=float(c[4]),
                mapping_eff_pct=float(c[5]),
                compute_util_pct=float(c[6]),
                sram_ifmap_reads=int(float(a[3])),
                sram_filter_reads=int(float(a[6])),
                sram_ofmap_writes=int(float(a[9])),
                dram_ifmap_reads=int(float(a[12])),
                dram_filter_reads=int(float(a[15])),
                dram_ofmap_writes=int(float(a[18])),
                raw_compute=tuple(c),
            )
        )
    return out, wall_s

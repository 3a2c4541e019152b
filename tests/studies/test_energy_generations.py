"""The energy-generations study on its reduced configuration (NVIDIA V100 -> B200, Llama-2-7B decode): dynamic
energy per token falls with every generation, static energy is idle power times time, and no token costs
less than streaming the weights from HBM once per step."""

from __future__ import annotations

import csv

import pytest

from studies._cli import load_config
from studies.energy_generations import run

ORDER = ["v100-sxm2-32gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200"]


@pytest.fixture(scope="module")
def rows():
    return run.run(load_config(run.HERE / "config.toml", reduced=True))


def test_reduced_config_selects_by_name():
    cfg = load_config(run.HERE / "config.toml", reduced=True)
    assert [f["name"] for f in cfg["families"]] == ["NVIDIA GPU"]
    assert [w["model"] for w in cfg["workloads"]] == ["llama-2-7b"]
    assert cfg["families"][0]["devices"] == ORDER
    with pytest.raises(ValueError, match="reduced.families: unknown name.*did you mean 'NVIDIA GPU'"):
        load_config(_bad_config(), reduced=True)


def _bad_config():
    import tempfile
    from pathlib import Path

    text = (run.HERE / "config.toml").read_text().replace('families = ["NVIDIA GPU"]', 'families = ["NVIDIA GPUs"]')
    path = Path(tempfile.mkdtemp()) / "config.toml"
    path.write_text(text)
    return path


def test_energy_per_token_across_generations(rows):
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload

    assert [r["device"] for r in rows] == ORDER
    assert all(r["fits_in_memory"] and r["power_capped_ops"] == 0 for r in rows)
    batch = rows[0]["batch"]
    dyn = [r["dynamic_energy_j"] / batch for r in rows]
    total = [r["energy_per_item_j"] for r in rows]
    assert all(a > b for a, b in zip(dyn, dyn[1:], strict=False))  # every generation spends less per operation
    # per token: V100 highest, then A100 ~ H100, H200, B200 lowest; the H100 spends 1.8% less than the A100 (its
    # step is 1.68x shorter at 1.65x the power, with both boards' tensor energies from their sustained GEMM burns;
    # 245.2 against 240.7 mJ since the A100's batch-16 decode GEMMs stream at cuBLAS's measured GEMV rate (0.733,
    # where they had MT4G's read figure 0.758): a longer step, more idle energy; 243.5 against 240.7 mJ before)
    assert total[0] > max(total[1], total[2]) and min(total[1], total[2]) > total[3] > total[4]
    # (with the Hopper DRAM figure at gpu-stream's triad, 0.946 for MT4G's 0.821, the H100's step shortened and its
    # energy per token fell to 233.2 mJ, 4.9% below the A100's; with the H100 SXM's batch-16 decode GEMMs at cuBLAS's
    # measured Hopper GEMV rate, 0.762, as the A100's are at its 0.733, 244.5 against 245.2 mJ: 0.3% lower)
    assert total[2] == pytest.approx(total[1] * (1 - 0.003), rel=0.003)
    g = load_workload("llama-2-7b", phase="decode", batch=16, context=1024, dtype="fp16")
    for r in rows:
        dev = load_hardware(r["device"])
        # static energy is the idle power over the step (no op is power-capped here)
        assert r["static_energy_j"] == pytest.approx(dev.power.idle_w * r["latency_s"], rel=1e-9)
        # a decode step reads every weight from HBM at least once: a floor on the dynamic energy
        floor = g.weight_bytes * dev.main_memory.energy_j_per_byte
        assert r["dynamic_energy_j"] >= floor
    # B200 versus H200: the B200's idle power (a fixed fraction of its 1000 W TDP) is higher by about as
    # much as its step is shorter (1.43x; 1.46x since the B200 streams at its own measured rate, 0.850 of
    # 8 TB/s: docs/accuracy.md, 1.41x since its per-kernel device time is its own measured 1.56 us, not a
    # laptop GPU's 0.58), so static energy per step is about the H200's (1% more) while dynamic energy falls
    h200, b200 = rows[3], rows[4]
    assert b200["latency_s"] < h200["latency_s"]
    idle_ratio = load_hardware("b200").power.idle_w / load_hardware("h200-sxm-141gb").power.idle_w
    assert idle_ratio == pytest.approx(1.4286, rel=1e-3)
    # 1.415 before the H200's streaming figure became its own measured stream (0.880 for MT4G's H100 read 0.821);
    # 1.380 before an H200 GEMM's last wave that leaves SMs idle loaded L2 at one SM's own intake
    # (efficiency.l2_tile_sm_port_ratio; the B200 states none)
    assert h200["latency_s"] / b200["latency_s"] == pytest.approx(1.367, rel=0.005)
    # 3.5% more since the H200's step shortened with its own streaming figure (idle 1.43x over a step 1.38x shorter),
    # 4.5% more since its GEMMs' last waves load at one SM's own L2 intake (a step 1.37x shorter)
    assert b200["static_energy_j"] == pytest.approx(1.045 * h200["static_energy_j"], rel=0.01)
    assert b200["static_energy_j"] > h200["static_energy_j"]
    assert b200["dynamic_energy_j"] < h200["dynamic_energy_j"]


def test_runner_writes_csv_and_figure(tmp_path, rows):
    run.write_csv(rows, tmp_path / run.CSV_NAME)  # what `main` writes before it draws (the run is the fixture's)
    assert run.main(["--plot-only", "--out", str(tmp_path)]) == 0
    with open(tmp_path / run.CSV_NAME, newline="") as f:
        back = list(csv.DictReader(f))
    assert [r["device"] for r in back] == ORDER and set(back[0]) == set(run.COLUMNS)
    assert (tmp_path / run.FIGURE_NAME).read_bytes()[:4] == b"\x89PNG"


def test_committed_results_are_current(rows, committed_csv):
    """The committed results.csv (and the figures drawn from it) is today's model, in every column, on every row
    the reduced configuration computes."""
    n = committed_csv(rows, run.HERE / run.CSV_NAME, run.write_csv, ["family", "device", "workload"],
                      refresh="python -m studies.energy_generations --out studies/energy_generations --figures docs/figures")
    assert n == len(rows)

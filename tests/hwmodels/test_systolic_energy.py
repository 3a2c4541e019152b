"""Energy of a systolic-array run: a hand-computed GEMM, the sourced defaults, SRAM size scaling, the
vectorised path against scalar calls, the `nodeperf systolic` JSON/CSV, sweeps, bad input, and a
cross-check of a TPU-v1-like array on ResNet-50 against the TPU v1 paper (a band, not a fit)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from hwmodels.systolic import (
    DEFAULT_ENERGY_FILE,
    HOPS_PER_MAC,
    SystolicEnergyError,
    dtype_for_word_bytes,
    gemm_cycles,
    load_systolic_energy,
    operand_words,
    sram_j_per_byte,
    systolic_energy,
)
from simulator.cli import main

REPO = Path(__file__).resolve().parents[2]
GEMM_TOPO = REPO / "tests/hwmodels/data/parity_gemm.csv"
RESNET50 = REPO / "studies/topologies/resnet50.csv"
PJ = 1e-12

# Round coefficients for the hand computation (not the shipped defaults).
ROUND = """
technology_node = "test"
[mac.int8]
multiply_j = { value = "0.2 pJ/OP", source = "test" }
accumulate_j = { value = "0.1 pJ/OP", source = "test" }
[register]
j_per_byte = { value = "0.1 pJ/B", source = "test" }
[sram]
points = [
    { capacity = "1 KiB", j_per_byte = "1 pJ/B", source = "test" },
    { capacity = "4 KiB", j_per_byte = "2 pJ/B", source = "test" },
    { capacity = "16 KiB", j_per_byte = "4 pJ/B", source = "test" },
]
[dram]
j_per_byte = { value = "100 pJ/B", source = "test" }
[static]
pe_w = { value = "1 mW", source = "test" }
other_w = { value = "0.5 W", source = "test" }
[clock]
hz = { value = "1 GHz", source = "test" }
"""


@pytest.fixture(scope="module")
def round_params(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("energy") / "round.toml"
    path.write_text(ROUND, encoding="utf-8")
    return load_systolic_energy(path=path)


def test_hand_computed_tiny_gemm(round_params) -> None:  # type: ignore[no-untyped-def]
    """ws, 4x4 array, M=8, N=4, K=6, scratchpads of 1024/4096/2048 one-byte words, 2 words/cycle."""
    r = gemm_cycles(4, 4, "ws", 8, 4, 6, sram_words=(1024, 4096, 2048), dram_words_per_cycle=2)
    # counts by hand: sr = K = 6, sc = N = 4, t = M = 8 -> 2 row folds x 1 column fold
    assert int(r.macs) == 8 * 4 * 6 == 192
    assert (int(r.sram_ifmap_reads), int(r.sram_filter_reads)) == (8 * 6, 6 * 4)
    assert (int(r.sram_ofmap_writes), int(r.sram_ofmap_reads)) == (8 * 4 * 2, 8 * 4 * 1)
    assert (int(r.dram_ifmap_reads), int(r.dram_filter_reads), int(r.dram_ofmap_writes),
            int(r.dram_ofmap_reads)) == (48, 24, 32, 0)  # everything fits: each operand crosses DRAM once
    # 2 folds of 4 + 8 + 4 + 4 - 2 = 18 cycles - 1; 16-word first tile = 8 prefetch cycles;
    # ceil((104 - 16) / 2) = 44 overlapped DRAM cycles -> 9 stall cycles
    assert (int(r.compute_cycles), int(r.prefetch_cycles), int(r.stall_cycles), int(r.total_cycles)) == (35, 8, 9, 52)

    e = systolic_energy(r, dtype="int8", sram_bytes=(1024, 4096, 2048), word_bytes=1, params=round_params)
    assert float(e.mac_j) == pytest.approx(192 * 0.3 * PJ, rel=1e-12)
    assert float(e.register_j) == pytest.approx(2 * 192 * 1 * 0.1 * PJ, rel=1e-12)
    # ifmap 1 KiB -> 1 pJ/B; filter 4 KiB -> 2 pJ/B; ofmap 2 KiB: half-way on log axes -> sqrt(2) pJ/B
    assert float(e.sram_ifmap_j) == pytest.approx((48 + 48) * 1.0 * PJ, rel=1e-12)
    assert float(e.sram_filter_j) == pytest.approx((24 + 24) * 2.0 * PJ, rel=1e-12)
    assert float(e.sram_ofmap_j) == pytest.approx((64 + 32 + 32) * math.sqrt(2.0) * PJ, rel=1e-12)
    assert float(e.dram_j) == pytest.approx(104 * 100 * PJ, rel=1e-12)
    assert float(e.static_j) == pytest.approx((16 * 1e-3 + 0.5) * 52 / 1e9, rel=1e-12)
    parts = e.breakdown()
    assert float(e.energy_j) == pytest.approx(sum(float(v) for v in parts.values()), rel=1e-15)
    # twice the word size doubles every byte-priced part; half the clock doubles the static part
    e2 = systolic_energy(r, dtype="int8", sram_bytes=(1024, 4096, 2048), word_bytes=2, clock_hz=0.5e9,
                         params=round_params)
    assert float(e2.dram_j) == pytest.approx(2 * float(e.dram_j), rel=1e-12)
    assert float(e2.register_j) == pytest.approx(2 * float(e.register_j), rel=1e-12)
    assert float(e2.static_j) == pytest.approx(2 * float(e.static_j), rel=1e-12)
    assert float(e2.mac_j) == float(e.mac_j)


def test_defaults_are_the_cited_numbers() -> None:
    p = load_systolic_energy()
    assert p.technology_node == "45 nm"
    assert p.source_files == (str(DEFAULT_ENERGY_FILE),)
    # Horowitz ISSCC 2014 (45 nm): multiply + accumulate
    assert p.mac_j("int8") == pytest.approx((0.2 + 0.1) * PJ, rel=1e-12)
    assert p.mac_j("bf16") == p.mac_j("fp16") == pytest.approx((1.1 + 0.9) * PJ, rel=1e-12)
    assert p.mac_j("fp32") == pytest.approx((3.7 + 0.9) * PJ, rel=1e-12)
    # SRAM 10 / 20 / 100 pJ per 64-bit access at 8 KB / 32 KB / 1 MB; DRAM 1.3 nJ per 64 bits
    assert p.sram_capacity_bytes == (8 * 1024, 32 * 1024, 1024 * 1024)
    assert np.allclose(p.sram_j_per_byte, np.array([10, 20, 100]) / 8 * PJ, rtol=1e-12)
    assert p.dram_j_per_byte == pytest.approx(1300 / 8 * PJ, rel=1e-12)
    assert p.register_j_per_byte == pytest.approx(0.009 * 8 * PJ, rel=1e-12)  # Aladdin 40 nm, per bit
    assert p.pe_static_w == pytest.approx(80e-6 + 2.4e-6, rel=1e-12)
    # every number carries a source
    numbers = {f"mac.{d}.{part}" for d in p.dtypes for part in ("multiply_j", "accumulate_j")} | {
        "register.j_per_byte", "dram.j_per_byte", "static.pe_w", "static.other_w", "clock.hz"} | {
        f"sram.points[{i}].j_per_byte" for i in range(3)}
    assert set(p.sources) == numbers and all(p.sources[k].strip() for k in numbers)


def test_sram_energy_grows_with_size() -> None:
    p = load_systolic_energy()
    caps = np.logspace(6, 27, 200, base=2.0)  # 64 B .. 128 MiB
    e = sram_j_per_byte(caps, p)
    assert np.all(np.diff(e) > 0)
    # through the published points, and a power law between them: 16 KiB is sqrt(2) x the 8 KiB figure
    assert np.allclose(sram_j_per_byte([8192, 32768, 2**20], p), p.sram_j_per_byte, rtol=1e-12)
    assert float(sram_j_per_byte(16384, p)) == pytest.approx(1.25 * math.sqrt(2) * PJ, rel=1e-12)
    # a larger scratchpad never makes the same run cheaper
    r = gemm_cycles(16, 16, "os", 200, 100, 300)
    small = systolic_energy(r, dtype="int8", sram_bytes=(8192, 8192, 8192))
    big = systolic_energy(r, dtype="int8", sram_bytes=(2**21, 2**21, 2**21))
    assert float(big.sram_j) > float(small.sram_j)
    assert float(big.mac_j) == float(small.mac_j) and float(big.dram_j) == float(small.dram_j)


def test_vectorised_equals_scalar_calls() -> None:
    rows = np.array([4, 8, 16, 32])[:, None, None]
    cols = np.array([8, 16])[None, :, None]
    caps = np.array([512, 4096, 65536])[None, None, :]
    clock = np.array([0.5e9, 0.7e9, 1e9])[None, None, :]
    for df in ("os", "ws", "is"):
        r = gemm_cycles(rows, cols, df, 100, 70, 90, sram_words=(caps, caps // 2, caps), dram_words_per_cycle=4)
        e = systolic_energy(r, dtype="bf16", sram_bytes=(2 * caps, caps, 2 * caps), word_bytes=2, clock_hz=clock)
        assert e.energy_j.shape == (4, 2, 3)
        for i, rr in enumerate(rows.ravel()):
            for j, cc in enumerate(cols.ravel()):
                for q, cap in enumerate(caps.ravel()):
                    one = gemm_cycles(int(rr), int(cc), df, 100, 70, 90, sram_words=(int(cap), int(cap) // 2, int(cap)),
                                      dram_words_per_cycle=4)
                    s = systolic_energy(one, dtype="bf16", sram_bytes=(2 * int(cap), int(cap), 2 * int(cap)),
                                        word_bytes=2, clock_hz=float(clock.ravel()[q]))
                    for name, part in e.breakdown().items():
                        assert float(part[i, j, q]) == pytest.approx(float(s.breakdown()[name]), rel=1e-14), name


def test_energy_leaves_cycles_untouched_and_parts_are_physical() -> None:
    r = gemm_cycles(8, 8, "os", 64, 64, 64, sram_words=(1024, 1024, 1024), dram_words_per_cycle=10)
    assert int(r.total_cycles) == 4998  # the worked example of hwmodels.systolic, unchanged
    e = systolic_energy(r, dtype="int8", sram_bytes=(1024, 1024, 1024))
    p = load_systolic_energy()
    assert float(e.register_j) == pytest.approx(HOPS_PER_MAC * 64**3 * p.register_j_per_byte, rel=1e-12)
    assert float(e.dram_j) == pytest.approx(40960 * p.dram_j_per_byte, rel=1e-12)
    assert all(float(v) > 0 for v in e.breakdown().values())
    # more DRAM bandwidth: same dynamic energy, no more static energy
    fast = gemm_cycles(8, 8, "os", 64, 64, 64, sram_words=(1024, 1024, 1024), dram_words_per_cycle=1000)
    ef = systolic_energy(fast, dtype="int8", sram_bytes=(1024, 1024, 1024))
    assert float(ef.dram_j) == float(e.dram_j) and float(ef.static_j) <= float(e.static_j)


def test_exact_integer_results_are_priced() -> None:
    """Object arrays of Python ints (counts beyond int64) price without wrapping."""
    r = gemm_cycles(4, 4, "os", 10**7, 10**7, 10**7)
    assert np.asarray(r.macs).dtype == object
    e = systolic_energy(r, dtype="fp32", sram_bytes=(2**20, 2**20, 2**20), word_bytes=4)
    assert float(e.mac_j) == pytest.approx(1e21 * 4.6 * PJ, rel=1e-12)
    assert np.isfinite(float(e.energy_j))


def test_operand_words_and_word_dtypes() -> None:
    ifw, fw, ow = operand_words([8, 16], [4, 2], [6, 3], [40, 100])
    assert ifw.tolist() == [40, 48] and fw.tolist() == [24, 6] and ow.tolist() == [32, 32]
    assert [dtype_for_word_bytes(b) for b in (1, 2, 4)] == ["int8", "bf16", "fp32"]
    with pytest.raises(SystolicEnergyError, match="no dtype for a 3-byte word"):
        dtype_for_word_bytes(3)


def test_overlay_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "ov.toml"
    f.write_text('[dram]\nj_per_byte = { value = "3.97 pJ/bit", source = "HBM2" }\n'
                 '[mac.fp8]\nmultiply_j = { value = "0.3 pJ/OP", source = "x" }\n'
                 'accumulate_j = { value = "0.4 pJ/OP", source = "x" }\n', encoding="utf-8")
    p = load_systolic_energy(f, {"static.other_w": "2 W"})
    assert p.dram_j_per_byte == pytest.approx(3.97 * 8 * PJ, rel=1e-12)
    assert p.mac_j("fp8") == pytest.approx(0.7 * PJ, rel=1e-12) and p.mac_j("int8") == pytest.approx(0.3 * PJ)
    assert p.other_static_w == 2.0 and p.sources["static.other_w"] == "override (--energy-set)"
    assert p.source_files == (str(DEFAULT_ENERGY_FILE), str(f), "--energy-set")


@pytest.mark.parametrize(("text", "needle"), [
    ('[dram]\nj_per_byte = { value = "-1 pJ/B", source = "x" }\n', "dram.j_per_byte: negative energy; got '-1 pJ/B'"),
    ('[dram]\nj_per_byte = { value = "1 pJ", source = "x" }\n', "dram.j_per_byte: unknown unit 'pJ'"),
    ('[dram]\nj_per_byte = { value = "1 pJ/B" }\n', "dram.j_per_byte: no source"),
    ('[dram]\nj_per_bite = { value = "1 pJ/B", source = "x" }\n', "did you mean 'j_per_byte'?"),
    ('[statc]\npe_w = { value = "1 mW", source = "x" }\n', "did you mean 'static'?"),
    ('[static]\npe_w = { value = "-1 mW", source = "x" }\n', "static.pe_w: negative power"),
    ('[clock]\nhz = { value = "0 Hz", source = "x" }\n', "clock.hz: not a positive clock"),
    ('[mac.fp8]\nmultiply_j = { value = "1 pJ/OP", source = "x" }\n', "mac.fp8.accumulate_j: missing"),
    ('[sram]\npoints = [{ capacity = "1 MiB", j_per_byte = "1 pJ/B", source = "x" }, '
     '{ capacity = "2 MiB", j_per_byte = "0.5 pJ/B", source = "x" }]\n', "energy falls with capacity"),
    ("[dram\n", "not valid TOML"),
    ('[statc]\npe_w = { value = "1 mW", source = "x" }\n', "statc: unknown key; got 'statc'; expected one of schema, "
     "technology_node, refs, mac, register, sram, dram, static, clock; did you mean 'static'?"),
    ("[sram]\npoint = []\n", "sram.point: unknown key; got 'point'; expected points; did you mean 'points'?"),
    ('[mac.fp8]\nmultiply = { value = "1 pJ/OP", source = "x" }\n', "mac.fp8.multiply: unknown field; got "
     "'multiply'; expected multiply_j or accumulate_j; did you mean 'multiply_j'?"),
    ('[dram]\nj_per_bite = { value = "1 pJ/B", source = "x" }\n', "dram.j_per_bite: unknown field; got 'j_per_bite'; "
     "expected one of j_per_byte; did you mean 'j_per_byte'?"),
])
def test_bad_coefficients_are_located(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(SystolicEnergyError) as info:
        load_systolic_energy(f)
    assert needle in str(info.value) and str(f) in str(info.value)


def test_bad_energy_inputs() -> None:
    r = gemm_cycles(4, 4, "os", 8, 8, 8)
    with pytest.raises(SystolicEnergyError, match="got 'bf17'.*did you mean 'bf16'"):
        systolic_energy(r, dtype="bf17", sram_bytes=(64, 64, 64))
    with pytest.raises(SystolicEnergyError, match="scratchpad capacity"):
        systolic_energy(r, dtype="int8", sram_bytes=(64, 0, 64))
    with pytest.raises(SystolicEnergyError, match="clock_hz"):
        systolic_energy(r, dtype="int8", sram_bytes=(64, 64, 64), clock_hz=float("nan"))
    with pytest.raises(SystolicEnergyError, match="sram_bytes"):
        systolic_energy(r, dtype="int8", sram_bytes=(64, 64))  # type: ignore[arg-type]
    with pytest.raises(SystolicEnergyError, match="--energy-set: dram.j_per_bite: unknown field"):
        load_systolic_energy(overrides={"dram.j_per_bite": "1 pJ/B"})


# ------------------------------------------------------------------------------------------------
# CLI


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json_energy(capsys: pytest.CaptureFixture[str]) -> None:
    from hwmodels.topology import read_topology
    from simulator.cli.systolic import evaluate_topology

    rc, out, _ = _run(capsys, "systolic", "--rows", "16", "--cols", "8", "--dataflow", "ws", "--topology",
                      str(GEMM_TOPO), "--sram-kib", "4,4,2", "--dram-words-per-cycle", "3", "--dtype", "bf16",
                      "--clock", "700 MHz", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert set(doc["energy_breakdown_j"]) == {"mac", "register", "sram", "dram", "static"}
    assert doc["energy_j"] == pytest.approx(sum(doc["energy_breakdown_j"].values()), rel=1e-12)
    assert doc["energy_j"] == pytest.approx(sum(layer["energy_j"] for layer in doc["layers"]), rel=1e-12)
    assert (doc["dtype"], doc["word_bytes"], doc["clock_hz"]) == ("bf16", 2, 700e6)
    assert doc["sram_words"] == [2048, 2048, 1024]  # KiB of 2-byte words
    assert doc["latency_s"] == pytest.approx(doc["total_cycles"] / 700e6, rel=1e-12)
    # the same as the library called directly
    topo = read_topology(GEMM_TOPO)
    r = evaluate_topology(topo, 16, 8, "ws", sram_words=(2048, 2048, 1024), dram_words_per_cycle=3.0)
    e = systolic_energy(r, dtype="bf16", sram_bytes=(4096, 4096, 2048), word_bytes=2, clock_hz=700e6)
    assert doc["energy_j"] == pytest.approx(float(np.sum(e.energy_j)), rel=1e-12)
    assert doc["total_cycles"] == int(np.sum(r.total_cycles))
    assert doc["energy_breakdown_j"]["mac"] == pytest.approx(float(np.sum(r.macs)) * 2.0 * PJ, rel=1e-12)


def test_cli_unbounded_scratchpads_priced_at_largest_operand(capsys: pytest.CaptureFixture[str]) -> None:
    from hwmodels.topology import read_topology

    rc, out, _ = _run(capsys, "systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology",
                      str(GEMM_TOPO), "--json")
    assert rc == 0
    doc = json.loads(out)
    a = read_topology(GEMM_TOPO).gemm_arrays()
    whole = [int(np.max(w)) for w in operand_words(a["m"], a["n"], a["k"], a["ifmap_words"])]
    r = gemm_cycles(8, 8, "os", a["m"], a["n"], a["k"], ifmap_words=a["ifmap_words"])
    e = systolic_energy(r, dtype="int8", sram_bytes=tuple(whole), word_bytes=1)  # type: ignore[arg-type]
    assert doc["energy_j"] == pytest.approx(float(np.sum(e.energy_j)), rel=1e-12)
    assert (doc["dtype"], doc["word_bytes"], doc["clock_hz"]) == ("int8", 1, 1e9)


def test_cli_table_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.csv"
    rc, stdout, _ = _run(capsys, "systolic", "--rows", "8", "--cols", "8", "--dataflow", "is", "--topology",
                         str(GEMM_TOPO), "--out", str(out), "--energy-set", "static.other_w=1 W")
    assert rc == 0
    assert "energy " in stdout and "MAC " in stdout and "DRAM " in stdout and "static " in stdout
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][-1] == "Energy (J)" and all(float(r[-1]) > 0 for r in rows[1:])


@pytest.mark.parametrize(("extra", "needle"), [
    (("--dtype", "bf17"), "got 'bf17'"),
    (("--energy-set", "dram.j_per_byte=-3 pJ/B"), "negative energy"),
    (("--energy-set", "dram.j_per_byte"), "--energy-set: not PATH=VALUE"),
    (("--energy", "no-such-energy.toml"), "no-such-energy.toml: no such file"),
    (("--clock", "700"), "--clock: bare number"),
    (("--clock", "0 MHz"), "--clock: not a positive frequency"),
    (("--dtype", "fp8_e4m3"), "got 'fp8_e4m3'"),
])
def test_cli_bad_energy_input_exit_2(capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], needle: str) -> None:
    rc, out, err = _run(capsys, "systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology",
                        str(GEMM_TOPO), *extra)
    assert rc == 2 and out == ""
    assert err.startswith("nodeperf: error: ") and err.count("\n") == 1, err
    assert needle in err


# ------------------------------------------------------------------------------------------------
# sweeps


def test_network_variants_energy_equals_per_layer_sum() -> None:
    from hwmodels.topology import read_topology
    from simulator.sweep.systolic import systolic_network_variants

    topo = read_topology(GEMM_TOPO)
    v = systolic_network_variants(topo, [8, 16, 32], 16, ["os", "ws", "is"], 2048, 4096, 1024, 4.0,
                                  word_bytes=2, clock_hz=5e8)
    assert v.dtype == "bf16"
    a = topo.gemm_arrays()
    for i, (r_, df) in enumerate(zip((8, 16, 32), ("os", "ws", "is"), strict=True)):
        r = gemm_cycles(r_, 16, df, a["m"], a["n"], a["k"], ifmap_words=a["ifmap_words"],
                        sram_words=(1024, 2048, 512), dram_words_per_cycle=4.0)
        e = systolic_energy(r, dtype="bf16", sram_bytes=(2048, 4096, 1024), word_bytes=2, clock_hz=5e8)
        assert float(v.energy_j[i]) == pytest.approx(float(np.sum(e.energy_j)), rel=1e-12)
        for k, part in e.breakdown().items():
            assert float(v.energy_breakdown_j[k][i]) == pytest.approx(float(np.sum(part)), rel=1e-12)


def test_sweep_store_has_energy(tmp_path: Path) -> None:
    from simulator.sweep import load_results, run_sweep
    from simulator.sweep.systolic import systolic_network_variants

    (tmp_path / "g.csv").write_text("Layer name, M, N, K,\ng, 64, 64, 64,\n", encoding="utf-8")
    f = tmp_path / "t.toml"
    f.write_text('[workload]\ntopology = "g.csv"\n[systolic]\ncols = 8\ndataflow = "os"\nsram_bytes = "1 KiB"\n'
                 'dram_words_per_cycle = 10\nclock_hz = "1 GHz"\n[axes.systolic]\nrows = [8, 16]\n', encoding="utf-8")
    run_sweep(f, tmp_path / "t.sqlite", scheduler="synchronous")
    df = load_results(tmp_path / "t.sqlite").set_index("systolic.rows")
    v = systolic_network_variants(tmp_path / "g.csv", [8, 16], 8, "os", 1024, 1024, 1024, 10.0, clock_hz=1e9)
    for i, rows in enumerate((8, 16)):
        assert df.loc[rows, "energy_j"] == pytest.approx(float(v.energy_j[i]), rel=1e-12)
    # the worked example (8x8 os): hand-priced from its counts
    r = gemm_cycles(8, 8, "os", 64, 64, 64, sram_words=(1024, 1024, 1024), dram_words_per_cycle=10)
    e = systolic_energy(r, dtype="int8", sram_bytes=(1024, 1024, 1024), clock_hz=1e9)
    assert df.loc[8, "energy_j"] == pytest.approx(float(e.energy_j), rel=1e-12)


# ------------------------------------------------------------------------------------------------
# cross-check against the TPU v1 paper (reported, not fitted)

#: Jouppi et al., ISCA 2017, Table 2: TPU die measured busy power 40 W; Table 3: CNN0 at 86 TOPS.
TPU_V1_BUSY_W = 40.0
TPU_V1_CNN0_OPS_PER_S = 86e12


def test_tpu_v1_like_resnet50_energy_per_op_within_a_band() -> None:
    """256x256 int8 weight-stationary array at 700 MHz, 24 MiB unified buffer (ifmap), 256 KiB weight FIFO
    (filter), 4 MiB accumulators (ofmap), ideal memory (activations stay on chip as on the TPU). The
    on-die energy per op (MAC + register + SRAM + static) is compared with the TPU v1 die's measured
    40 W / 86 TOPS = 0.465 pJ/op. The 45 nm coefficients price a 28 nm chip, so the model is expected
    above it; the band guards against an order-of-magnitude error, it is not a fit."""
    from simulator.sweep.systolic import systolic_network_variants

    v = systolic_network_variants(RESNET50, 256, 256, "ws", 24 * 2**20, 256 * 2**10, 4 * 2**20, None,
                                  word_bytes=1, clock_hz=700e6, dtype="int8")
    ops = 2.0 * v.macs
    b = {k: float(x[0]) for k, x in v.energy_breakdown_j.items()}
    on_die = (b["mac"] + b["register"] + b["sram"] + b["static"]) / ops
    tpu = TPU_V1_BUSY_W / TPU_V1_CNN0_OPS_PER_S
    assert 1.0 < on_die / tpu < 4.0, on_die / tpu
    # the MAC alone (0.15 pJ/op at 45 nm) is below the TPU's whole-die figure
    assert b["mac"] / ops == pytest.approx(0.15 * PJ, rel=1e-12) and b["mac"] / ops < tpu

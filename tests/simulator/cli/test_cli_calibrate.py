"""CLI measure/calibrate/validate end to end on this machine's CPU, the published GPU set, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "hwmodels" / "measurements" / "published_gpu.csv"
SUMMARY_KEYS = {"n", "mape", "median_ape", "p90_ape", "max_ape", "bias"}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    rc = main(argv)
    out = capsys.readouterr().out
    return rc, (json.loads(out) if rc == 0 or out.strip().startswith("{") else {})


@pytest.fixture(scope="module")
def cpu_measurements(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("cpu") / "host.csv"
    assert main(["measure", "--device", "cpu", "--suite", "quick", "--threads", "1", "--budget", "0.1",
                 "--out", str(out)]) == 0
    return out


def test_cpu_end_to_end(cpu_measurements: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overlay = tmp_path / "host.toml"
    measurements = cpu_measurements
    argv = ["calibrate", str(measurements), "--hardware", "host:1", "--out", str(overlay), "--json"]
    rc, res = _json(capsys, argv)
    for again in range(2):
        if not (rc == 1 and res and res["test"]["after"]["mape"] > res["test"]["before"]["mape"]):
            break
        # timings taken while other work loads the machine are noisy enough for the held-out split to get
        # worse by chance (calibrate then writes nothing, exit 1): measure again with a larger budget, at most
        # twice; a calibration that does not help fails every time
        measurements = tmp_path / f"host_again{again}.csv"
        assert main(["measure", "--device", "cpu", "--suite", "quick", "--threads", "1",
                     "--budget", str(0.2 * (again + 1)), "--out", str(measurements)]) == 0
        capsys.readouterr()  # the measurement's own report
        argv[1] = str(measurements)
        rc, res = _json(capsys, argv)
    assert rc == 0, res
    for split in ("train", "test"):
        for when in ("before", "after"):
            assert SUMMARY_KEYS <= set(res[split][when])
    # relative only: the absolute held-out figure depends on the machine (benchmarks/bench_host_calibration.py)
    assert res["test"]["after"]["mape"] < res["test"]["before"]["mape"]
    assert overlay.is_file()
    # the overlay applies to validate and reproduces the "after" error on the whole file
    rc, s = _json(capsys, ["validate", str(measurements), "--hardware", "host:1", "--calibration", str(overlay),
                           "--json", "--plot", str(tmp_path / "v.png")])
    assert rc == 0 and SUMMARY_KEYS <= set(s) and s["n"] == res["train"]["after"]["n"] + res["test"]["after"]["n"]
    assert (tmp_path / "v.png").stat().st_size > 0


def test_published_calibration_lowers_held_out_error_on_t4(capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = _json(capsys, ["calibrate", str(PUBLISHED), "--hardware", "t4", "--json"])
    assert rc == 0
    assert res["test"]["after"]["mape"] < res["test"]["before"]["mape"]
    assert res["train"]["before"]["n"] + res["test"]["before"]["n"] == 36


def test_rows_of_other_devices_left_out_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # published_gpu.csv: 172 rows, 36 of them T4's; the other 136 (11 devices) had been dropped without a word
    rc, res = _json(capsys, ["validate", str(PUBLISHED), "--hardware", "t4", "--json"])
    assert rc == 0 and res["n"] == 36 and res["rows_left_out"] == 136
    assert main(["validate", str(PUBLISHED), "--hardware", "t4"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "136 rows of 11 other devices left out (a100-pcie-40gb, a100-pcie-80gb, a100-sxm4-80gb, b200, 7 more): "
        "--hardware t4 keeps its own rows")
    # calibrate: the published L4 GEMMs (4) beside the A100 PCIe 40GB's (4)
    import csv

    with PUBLISHED.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["device"] in ("l4", "a100-pcie-40gb")]
    two = tmp_path / "two.csv"
    with two.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rc, res = _json(capsys, ["calibrate", str(two), "--hardware", "l4", "--json"])
    assert rc == 0 and res["rows_left_out"] == 4
    assert res["train"]["before"]["n"] + res["test"]["before"]["n"] == 4
    assert main(["calibrate", str(two), "--hardware", "l4"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == ("4 rows of 1 other device left out (a100-pcie-40gb): "
                                                       "--hardware l4 keeps its own rows")


def test_validate_published_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, s = _json(capsys, ["validate", "--dataset", "published", "--json"])
    assert rc == 0 and SUMMARY_KEYS <= set(s) and s["n"] >= 94 and "t4" in s["by_device"]
    assert s["rows_left_out"] == 0  # every device's rows are validated
    # the op-level / end-to-end groups partition the rows and match the library's summaries
    from simulator.calibration.validation import validate_published

    g = s["by_group"]
    assert g["op-level"]["n"] + g["end-to-end"]["n"] == s["n"]
    lib = validate_published()
    for name in ("op-level", "end-to-end"):
        assert g[name]["n"] == lib[name].n and g[name]["mape"] == pytest.approx(lib[name].mape, abs=1e-3)
    # B200's rows are all kernels: one kind, so no groups
    rc, one = _json(capsys, ["validate", "--dataset", "published", "--hardware", "b200", "--json"])
    assert rc == 0 and one["n"] == 25 and "by_group" not in one


def _bad(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize(("text", "needle"), [
    ("workload,device,median_s\ngemm:m=8,host,1\n", ":1: dtype: missing required column"),
    ('workload,device,dtype,median_s\n"gemm:m=8,n=8,k=8",host,fp32,-0.5\n', ":2: median_s: must be positive"),
    ('workload,device,dtype,median_s\n"gemm:m=8,n=8,k=8",host,fp32,NaN\n', ":2: median_s: not finite"),
    ('workload,device,dtype,median_s\n"gemm:m=8,n=8,k=8",hots,fp32,0.1\n', ":2: device: unknown device; got 'hots'"),
    ('workload,device,dtype,median_s\nresnet-5O,host,fp32,0.1\n', ":2: workload: model 'resnet-5O': unknown model"),
])
def test_bad_measurement_file_is_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                  needle: str) -> None:
    p = _bad(tmp_path, text)
    assert main(["validate", str(p), "--hardware", "t4"]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and needle in err and "Traceback" not in err


def test_overlay_with_unknown_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ov = tmp_path / "ov.toml"
    ov.write_text('schema = "nodeperf.calibration/1"\nsource = "measured: x"\n[values]\n"efficiency.dram_bandwith_fraction" = 0.8\n')
    assert main(["validate", "--dataset", "published", "--hardware", "t4", "--calibration", str(ov)]) == 2
    err = capsys.readouterr().err
    assert str(ov) in err and "did you mean 'dram_bandwidth_fraction'" in err


@pytest.mark.parametrize(("argv", "needle"), [
    (["measure", "--device", "cuda:x", "--out", "{tmp}/m.csv"], "--device; got 'cuda:x'; expected cpu, cuda or cuda:N"),
    (["measure", "--out", "{tmp}/no/m.csv"], "--out {tmp}/no/m.csv: no such folder"),
    (["measure", "--out", "{tmp}"], "--out {tmp}: is a folder"),
    (["measure", "--device", "cuda", "--device-name", "h100", "--out", "{tmp}/m.csv"],
     "--device-name; got 'h100'; expected a catalog device name (`nodeperf hardware` lists them); did you mean "
     "'h100-pcie-80gb' or 'h100-sxm5-80gb' or 'h100-sxm5-96gb'?"),
    (["calibrate", "{tmp}/bin.csv", "--hardware", "t4"], "{tmp}/bin.csv: not UTF-8 text; got byte 0xff at offset 1"),
    (["calibrate", str(PUBLISHED), "--hardware", "t4", "--out", "{tmp}/no/o.toml"], "--out {tmp}/no/o.toml: no such folder"),
    (["validate", "--dataset", "published", "--hardware", "t4", "--plot", "{tmp}/p.txt"],
     "--plot {tmp}/p.txt: unknown image format; got 'txt'"),
    (["validate", "--dataset", "published", "--hardware", "t4", "--calibration", "{tmp}/bin.csv"],
     "{tmp}/bin.csv: not UTF-8 text"),
    (["validate", "{tmp}/fp8.csv", "--hardware", "t4"],
     "{tmp}/fp8.csv:2: t4: compute.tensor_flops_per_s: no rate for dtype 'fp8_e4m3'"),
])
def test_bad_files_and_flags_are_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                                  needle: str) -> None:
    (tmp_path / "bin.csv").write_bytes(b"\x00\xff\xfe")
    (tmp_path / "fp8.csv").write_text('workload,device,dtype,median_s\n"gemm:m=8,n=8,k=8",t4,fp8_e4m3,0.1\n')
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert needle.replace("{tmp}", str(tmp_path)) in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_unknown_tile_loop_kernel_is_located_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A row whose notes name an unknown tile-loop kernel: one location (file:line), not the row's twice."""
    head, *rows = PUBLISHED.read_text().splitlines()
    row = next(r for r in rows if r.startswith("pub-095,"))
    assert "cub-ublkcp@b52534bf04:mul-int8" in row
    p = _bad(tmp_path, f"{head}\n{row.replace('mul-int8', 'mul-int16')}\n")
    assert main(["validate", str(p), "--hardware", "b200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"nodeperf: error: {p}:2: notes: unknown tile-loop kernel; got "
                          "'cub-ublkcp@b52534bf04:mul-int16'"), err
    assert err.count(f"{p}:2") == 1 and len(err.splitlines()) == 1

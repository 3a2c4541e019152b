"""Bad hardware, calibration, topology and output input through the real CLI: one located line, exit 2.

Every case runs ``nodeperf`` in-process (``simulator.cli.main``) on input built in ``tmp_path``: device
and system TOML files made from the catalog's with one defect each, calibration overlays, SCALE-Sim
topologies, output paths of every command that writes a file, numeric options, and dtypes a device has
no rate for. The contract checked (convention 6): exit code 2, no traceback, stderr starting
``nodeperf: error: ``, exactly one line for one problem (a count line and at most 20 located lines
for several), that line naming where (file, key or flag) and what was got, and no output file left
behind by a command that failed. Two regressions close the file: a spec with 5000 problems is
reported in 20 lines plus ``... and 4980 more``, and huge systolic arrays and layers give utilisations
within [0, 100] %, never negative or NaN.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from hwmodels.catalog import DEVICES_DIR, SYSTEMS_DIR
from simulator.cli import main
from tests.bad_input.contract import one_line, several

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "hwmodels" / "measurements" / "published_gpu.csv"
H100 = (DEVICES_DIR / "h100-sxm5-80gb.toml").read_text(encoding="utf-8")
TPU = (DEVICES_DIR / "tpu-v4.toml").read_text(encoding="utf-8")
DGX = (SYSTEMS_DIR / "dgx-h100.toml").read_text(encoding="utf-8")
GEMM = "gemm:m=64,n=64,k=64"
OVERLAY_HEAD = 'schema = "nodeperf.calibration/1"\nsource = "measured: test"\n'
GOOD_TOPOLOGY = "Layer, M, N, K,\ng1, 64, 64, 64,\n"


# ------------------------------------------------------------------------------------------------
# helpers


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``nodeperf argv`` (argparse's own errors exit through SystemExit)."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


def sub(text: str, pattern: str, repl: str) -> str:
    """``text`` with the one match of regex ``pattern`` (multiline) replaced; fails if it does not match once."""
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, pattern
    return new


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------
# device specs: `nodeperf predict MODEL --hardware FILE`

# (case id, file content or a builder, fragments the one line must hold)
DEVICE_CASES: list[tuple[str, str | bytes, tuple[str, ...]]] = [
    ("not-utf8", b"\xff\xfe name = 1\n", ("dev.toml: not UTF-8 text", "got byte 0xff")),
    ("latin1-in-string", 'name = "caf\xe9"\n'.encode("latin-1"), ("dev.toml: not UTF-8 text", "0xe9")),
    ("empty", "", ("dev.toml: empty file", "got 0 bytes")),
    ("blank-lines", "\n\n   \n", ("dev.toml: empty file",)),
    ("comments-only", "# a device\n# nothing else\n", ("dev.toml: empty file", "only comments")),
    ("invalid-toml", 'name = "x"\nkind = \n', ("dev.toml:2:8: invalid TOML", "got Invalid value")),
    ("invalid-toml-eof", 'name = "x"\nmemory = [\n', ("dev.toml:", "invalid TOML", "end of the file")),
    ("schema-7", sub(H100, r"^schema = 1$", "schema = 7"), ("dev.toml: schema: unknown schema version", "got 7",
                                                              "expected schema = 1")),
    ("schema-string", sub(H100, r"^schema = 1$", 'schema = "1"'), ("schema: unknown schema version", "got '1'")),
    ("schema-bool", sub(H100, r"^schema = 1$", "schema = true"), ("schema: unknown schema version", "got True")),
    ("count-quoted", sub(H100, r"^units = \{ value = 132,", 'units = { value = "132",'),
     ("dev.toml: compute.units: a quoted number is a string", "got '132'", "expected an integer, not a string")),
    ("count-quoted-sm", sub(H100, r"^registers_per_sm = \{ value = 65536,", 'registers_per_sm = { value = "65536",'),
     ("sm.registers_per_sm: a quoted number is a string", "got '65536'")),
    ("factor-quoted", sub(H100, r"^\[power\]", '[efficiency]\ntensor_peak_fraction = { value = "0.8", source = "x" }\n\n'
                                             "[power]"),
     ("efficiency.tensor_peak_fraction: a quoted number is a string", "got '0.8'", "expected a number, not a string")),
    ("count-fraction", sub(H100, r"^units = \{ value = 132,", "units = { value = 132.5,"),
     ("compute.units: not a whole number", "got 132.5")),
    ("count-zero", sub(H100, r"^units = \{ value = 132,", "units = { value = 0,"),
     ("compute.units: must be positive", "got 0")),
    ("count-negative", sub(H100, r"^units = \{ value = 132,", "units = { value = -4,"),
     ("compute.units: must be positive", "got -4")),
    ("count-nan", sub(H100, r"^units = \{ value = 132,", "units = { value = nan,"), ("compute.units:", "got nan")),
    ("bandwidth-zero", sub(H100, r'read_bandwidth_bytes_per_s = \{ value = "3.35 TB/s"',
                           'read_bandwidth_bytes_per_s = { value = "0 TB/s"'),
     ("memory.hbm.read_bandwidth_bytes_per_s: must be positive", "got 0 B/s")),
    ("bandwidth-negative", sub(H100, r'read_bandwidth_bytes_per_s = \{ value = "3.35 TB/s"',
                               'read_bandwidth_bytes_per_s = { value = "-3 TB/s"'),
     ("memory.hbm.read_bandwidth_bytes_per_s: must be positive", "got -3 TB/s")),
    ("bandwidth-nan", sub(H100, r'read_bandwidth_bytes_per_s = \{ value = "3.35 TB/s"',
                          'read_bandwidth_bytes_per_s = { value = "nan TB/s"'),
     ("memory.hbm.read_bandwidth_bytes_per_s: not a finite number", "got 'nan TB/s'")),
    ("bandwidth-inf", sub(H100, r'read_bandwidth_bytes_per_s = \{ value = "3.35 TB/s"',
                          'read_bandwidth_bytes_per_s = { value = "inf TB/s"'),
     ("memory.hbm.read_bandwidth_bytes_per_s: not a finite number", "got 'inf TB/s'")),
    ("bandwidth-bare-toml-number", sub(H100, r'read_bandwidth_bytes_per_s = \{ value = "3.35 TB/s"',
                                       "read_bandwidth_bytes_per_s = { value = 3.35e12"),
     ("memory.hbm.read_bandwidth_bytes_per_s: bare number without a unit", "got 3350000000000.0")),
    ("capacity-ambiguous-KB", sub(H100, r'capacity_bytes = \{ value = "80 GB"', 'capacity_bytes = { value = "80 KB"'),
     ("memory.hbm.capacity_bytes: ambiguous unit 'KB'", "got '80 KB'", "'kB'", "'KiB'")),
    ("capacity-ambiguous-Gb", sub(H100, r'capacity_bytes = \{ value = "80 GB"', 'capacity_bytes = { value = "80 Gb"'),
     ("memory.hbm.capacity_bytes: ambiguous unit 'Gb'", "got '80 Gb'")),
    ("capacity-wrong-dimension", sub(H100, r'capacity_bytes = \{ value = "80 GB"',
                                     'capacity_bytes = { value = "80 GB/s"'),
     ("memory.hbm.capacity_bytes: wrong dimension (a bandwidth)", "got '80 GB/s'")),
    ("capacity-quoted-bare", sub(H100, r'capacity_bytes = \{ value = "80 GB"', 'capacity_bytes = { value = "80"'),
     ("memory.hbm.capacity_bytes: bare number without a unit", "got '80'")),
    ("latency-frequency", sub(H100, r'latency_s = \{ value = "834 cycles"', 'latency_s = { value = "3 GHz"'),
     ("memory.hbm.latency_s: wrong dimension (a frequency)", "got '3 GHz'")),
    ("rate-negative", sub(H100, r'^bf16 = \{ value = "989.4 TFLOP/s"', 'bf16 = { value = "-989.4 TFLOP/s"'),
     ("compute.tensor_flops_per_s.bf16: must be positive", "got -989.4 TFLOP/s")),
    ("rate-zero", sub(H100, r'^bf16 = \{ value = "989.4 TFLOP/s"', 'bf16 = { value = "0 TFLOP/s"'),
     ("compute.tensor_flops_per_s.bf16: must be positive",)),
    ("rate-unknown-unit", sub(H100, r'^bf16 = \{ value = "989.4 TFLOP/s"', 'bf16 = { value = "989.4 TFLOPs"'),
     ("compute.tensor_flops_per_s.bf16: unknown unit 'TFLOPs'", "did you mean 'TFLOP/s'?")),
    ("clock-nan", sub(H100, r'^boost_hz = \{ value = "1980 MHz"', 'boost_hz = { value = "nan MHz"'),
     ("clock.boost_hz: not a finite number", "got 'nan MHz'")),
    ("power-zero", sub(H100, r'^tdp_w = \{ value = "700 W"', 'tdp_w = { value = "0 W"'),
     ("power.tdp_w: must be positive", "got 0 W")),
    ("value-bool", sub(H100, r'^tdp_w = \{ value = "700 W"', "tdp_w = { value = true"),
     ("power.tdp_w: not a quantity", "got True")),
    ("unknown-kind", sub(H100, r'^kind = "gpu"', 'kind = "gpx"'),
     ("kind: unknown device kind", "got 'gpx'", "did you mean 'gpu'?")),
    ("unknown-dtype-key", sub(H100, r'^bf16 = \{ value = "989.4 TFLOP/s"', 'bf61 = { value = "989.4 TFLOP/s"'),
     ("compute.tensor_flops_per_s.bf61: unknown dtype", "got 'bf61'", "did you mean 'bf16'?")),
    ("unknown-top-level-key", sub(H100, r"^\[refs\]", "colck = 1\n\n[refs]"),
     ("colck: unknown key", "got 'colck'", "did you mean 'clock'?")),
    ("missing-source", sub(H100, r'^tdp_w = \{ value = "700 W", source = "[^"]*" \}', 'tdp_w = { value = "700 W" }'),
     ("power.tdp_w: missing source", "got None")),
    ("system-key-in-device", sub(H100, r"^schema = 1$", "schema = 1\ncount = { value = 2, source = \"x\" }"),
     ("dev.toml: count: unknown key", "got 'count'", "expected a field of DeviceSpec")),
    ("tpu-dataflow-unknown", sub(TPU, r'^dataflow = "ws"', 'dataflow = "xs"'),
     ("dev.toml: systolic.dataflow: unknown dataflow", "got 'xs'", "expected one of os, ws, is")),
    ("tpu-dataflow-typo", sub(TPU, r'^dataflow = "ws"', 'dataflow = "wss"'),
     ("dev.toml: systolic.dataflow: unknown dataflow", "got 'wss'", "did you mean 'ws'?")),
    ("tpu-dataflow-not-string", sub(TPU, r'^dataflow = "ws"', "dataflow = 1"),
     ("dev.toml: systolic.dataflow: expected a string", "got 1")),
    ("tpu-rows-quoted", sub(TPU, r"^rows = \{ value = 128,", 'rows = { value = "128",'),
     ("systolic.rows: a quoted number is a string", "got '128'")),
    ("tpu-rows-zero", sub(TPU, r"^rows = \{ value = 128,", "rows = { value = 0,"),
     ("systolic.rows: must be positive", "got 0")),
]


@pytest.mark.parametrize(("content", "parts"), [c[1:] for c in DEVICE_CASES], ids=[c[0] for c in DEVICE_CASES])
def test_bad_device_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes,
                         parts: tuple[str, ...]) -> None:
    spec = write(tmp_path / "dev.toml", content)
    out_csv = tmp_path / "out.csv"
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", str(spec), "--csv", str(out_csv))
    one_line(rc, err, *[p.replace("dev.toml", str(spec)) for p in parts])
    assert not out_csv.exists()


@pytest.mark.parametrize("kind", ["folder", "missing"])
def test_device_path_that_is_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    path = tmp_path / "dev.toml"
    if kind == "folder":
        path.mkdir()
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", str(path))
    one_line(rc, err, str(path), "is a folder" if kind == "folder" else "file not found", f"got '{path}'")


def test_device_problems_are_listed_one_per_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = sub(H100, r"^\[refs\]", "foo = 1\nbar = 2\nbaz = 3\n\n[refs]")
    spec = write(tmp_path / "dev.toml", text)
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", str(spec))
    body = several(rc, err, 3, str(spec))
    assert [ln.split(": ")[1] for ln in body] == ["foo", "bar", "baz"]


def test_5000_problems_are_reported_as_20_lines_and_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = "".join(f"x{i} = 1\n" for i in range(5000))
    spec = write(tmp_path / "dev.toml", sub(H100, r"^\[refs\]", extra + "\n[refs]"))
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", str(spec))
    body = several(rc, err, 5000, str(spec))
    assert err.rstrip("\n").endswith("  ... and 4980 more")
    assert body[0].endswith("x0: unknown key; got 'x0'; expected a field of DeviceSpec")
    assert body[-1].startswith(f"  {spec}: x19: ")
    rc, _, err = run(capsys, "hardware", "show", str(spec))
    several(rc, err, 5000, str(spec))


# ------------------------------------------------------------------------------------------------
# system specs

SYSTEM_CASES: list[tuple[str, str, tuple[str, ...]]] = [
    ("unknown-device", sub(DGX, r'^device = "h100-sxm5-80gb"', 'device = "h100-sxm"'),
     ("sys.toml: device: unknown name", "got 'h100-sxm'", "did you mean 'h100-sxm5-80gb' or 'h100-sxm5-96gb'?")),
    ("device-missing", sub(DGX, r'^device = "h100-sxm5-80gb"\n', ""),
     ("sys.toml: device: missing field", "got nothing")),
    ("device-not-a-string", sub(DGX, r'^device = "h100-sxm5-80gb"', "device = 5"),
     ("sys.toml: device: expected a device name", "got 5")),
    ("count-zero", sub(DGX, r"^count = \{ value = 8,", "count = { value = 0,"),
     ("sys.toml: count: must be positive", "got 0")),
    ("count-negative", sub(DGX, r"^count = \{ value = 8,", "count = { value = -8,"),
     ("sys.toml: count: must be positive", "got -8")),
    ("count-quoted", sub(DGX, r"^count = \{ value = 8,", 'count = { value = "8",'),
     ("sys.toml: count: a quoted number is a string", "got '8'", "expected an integer, not a string")),
    ("count-fraction", sub(DGX, r"^count = \{ value = 8,", "count = { value = 8.5,"),
     ("sys.toml: count: not a whole number", "got 8.5")),
    ("count-bare", sub(DGX, r"^count = \{ value = 8, source = \"@hgx\" \}", "count = 8"),
     ("sys.toml: count: number without a source", "got 8")),
    ("schema-2", sub(DGX, r"^schema = 1$", "schema = 2"), ("sys.toml: schema: unknown schema version", "got 2")),
    ("links-naming-a-device", DGX + '\n[[links]]\nname = "nvl"\ndevice = "h100-foo"\n',
     ("sys.toml: links: unknown key", "got 'links'", "expected a field of SystemSpec")),
    ("fabric-naming-a-device", sub(DGX, r'^kind = "nvlink4-nvswitch"', 'kind = "nvlink4-nvswitch"\ndevice = "h100-foo"'),
     ("sys.toml: fabric.device: unknown key", "got 'device'", "expected a field of LinkSpec")),
    ("fabric-bandwidth-negative", sub(DGX, r'bandwidth_bytes_per_s = \{ value = "450 GB/s"',
                                      'bandwidth_bytes_per_s = { value = "-450 GB/s"'),
     ("sys.toml: fabric.bandwidth_bytes_per_s: must be positive", "got -450 GB/s")),
    ("fabric-latency-wrong-dimension", sub(DGX, r'latency_s = \{ value = "2.8 us"', 'latency_s = { value = "2.8 GHz"'),
     ("sys.toml: fabric.latency_s: wrong dimension (a frequency)", "got '2.8 GHz'")),
    ("device-path-missing", sub(DGX, r'^device = "h100-sxm5-80gb"', 'device = "nowhere/dev.toml"'),
     ("sys.toml: device:", "file not found", "dev.toml")),
    ("device-path-is-a-system", sub(DGX, r'^device = "h100-sxm5-80gb"', 'device = "sys.toml"'),
     ("sys.toml: device:", "a system file where a device is expected")),
    ("device-path-with-one-problem", sub(DGX, r'^device = "h100-sxm5-80gb"', 'device = "bad-dev.toml"'),
     ("sys.toml: device:", "bad-dev.toml: compute.units: must be positive", "got 0")),
]


@pytest.mark.parametrize(("content", "parts"), [c[1:] for c in SYSTEM_CASES], ids=[c[0] for c in SYSTEM_CASES])
@pytest.mark.parametrize("command", ["predict", "hardware-show"])
def test_bad_system_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, parts: tuple[str, ...],
                         command: str) -> None:
    spec = write(tmp_path / "sys.toml", content)
    write(tmp_path / "bad-dev.toml", sub(H100, r"^units = \{ value = 132,", "units = { value = 0,"))
    out_csv = tmp_path / "out.csv"
    argv = (["predict", GEMM, "--hardware", str(spec), "--csv", str(out_csv)] if command == "predict"
            else ["hardware", "show", str(spec)])
    rc, _, err = run(capsys, *argv)
    line = one_line(rc, err, *parts)
    assert "DeviceSpec" not in line or "links" in line  # the system's problem, not a device-schema listing
    assert not out_csv.exists()


def test_system_whose_device_file_has_several_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "dev.toml", sub(H100, r"^\[refs\]", "foo = 1\nbar = 2\n\n[refs]"))
    spec = write(tmp_path / "sys.toml", sub(DGX, r'^device = "h100-sxm5-80gb"', 'device = "dev.toml"'))
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", str(spec))
    body = several(rc, err, 2, str(spec))
    assert all(str(tmp_path / "dev.toml") in ln for ln in body)


# ------------------------------------------------------------------------------------------------
# calibration overlays: `--calibration FILE`

OVERLAY_CASES: list[tuple[str, str, str | bytes, tuple[str, ...]]] = [
    ("missing-schema", "h100-sxm5-80gb", 'source = "x"\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n',
     ("ov.toml: schema: missing overlay schema", "got no schema", "nodeperf.calibration/1")),
    ("unknown-schema", "h100-sxm5-80gb",
     'schema = "nodeperf.calibration/9"\nsource = "x"\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n',
     ("ov.toml: schema: unknown overlay schema", "got 'nodeperf.calibration/9'")),
    ("device-schema", "h100-sxm5-80gb", 'schema = 1\nsource = "x"\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n',
     ("ov.toml: schema: unknown overlay schema", "got 1")),
    ("value-text", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fraction" = "abc"\n',
     ("ov.toml: efficiency.tensor_peak_fraction: cannot read a number", "got 'abc'")),
    ("value-bool", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fraction" = true\n',
     ("ov.toml: efficiency.tensor_peak_fraction: not a quantity", "got True")),
    ("value-list", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fraction" = [0.5]\n',
     ("ov.toml: efficiency.tensor_peak_fraction: not a quantity", "got [0.5]")),
    ("value-nan", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fraction" = nan\n',
     ("ov.toml: efficiency.tensor_peak_fraction: not a finite number", "got nan")),
    ("value-quoted-number", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fraction" = "0.5"\n',
     ("ov.toml: efficiency.tensor_peak_fraction: a quoted number is a string", "got '0.5'")),
    ("value-above-one", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fraction" = 1.5\n',
     ("ov.toml: efficiency.tensor_peak_fraction: fraction above 1", "got 1.5")),
    ("bandwidth-inf", "h100-sxm5-80gb",
     OVERLAY_HEAD + '[values]\n"memory.hbm.read_bandwidth_bytes_per_s" = "inf TB/s"\n',
     ("ov.toml: memory.hbm.read_bandwidth_bytes_per_s: not a finite number", "got 'inf TB/s'")),
    ("bandwidth-negative", "h100-sxm5-80gb",
     OVERLAY_HEAD + '[values]\n"memory.hbm.read_bandwidth_bytes_per_s" = "-1 TB/s"\n',
     ("ov.toml: memory.hbm.read_bandwidth_bytes_per_s: must be positive", "got -1 TB/s")),
    ("bandwidth-ambiguous", "h100-sxm5-80gb",
     OVERLAY_HEAD + '[values]\n"memory.hbm.read_bandwidth_bytes_per_s" = "3 KB/s"\n',
     ("ov.toml: memory.hbm.read_bandwidth_bytes_per_s: ambiguous unit 'KB/s'", "got '3 KB/s'")),
    ("unknown-field", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fractoin" = 0.5\n',
     ("ov.toml: efficiency.tensor_peak_fractoin: unknown name", "got 'tensor_peak_fractoin'",
      "did you mean 'tensor_peak_fraction'?")),
    ("unknown-level", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"memory.hmb.read_bandwidth_bytes_per_s" = "1 TB/s"\n',
     ("ov.toml: memory.hmb.read_bandwidth_bytes_per_s: unknown name", "got 'hmb'", "did you mean 'hbm'?")),
    ("path-to-a-table", "h100-sxm5-80gb", OVERLAY_HEAD + '[values]\n"efficiency" = 0.5\n',
     ("ov.toml: efficiency: not a number field", "EfficiencySpec")),
    ("unknown-top-level-key", "h100-sxm5-80gb", OVERLAY_HEAD + '[valuse]\n"efficiency.tensor_peak_fraction" = 0.5\n',
     ("ov.toml: valuse: unknown top-level key", "got 'valuse'", "did you mean 'values'?")),
    ("no-values", "h100-sxm5-80gb", OVERLAY_HEAD, ("ov.toml: values: missing or empty", "got None")),
    ("no-source", "h100-sxm5-80gb",
     'schema = "nodeperf.calibration/1"\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n',
     ("ov.toml: source: missing", "got None")),
    ("fitted-for-another-device", "h100-sxm5-80gb",
     OVERLAY_HEAD + '[values]\n"efficiency.tensor_peak_fraction" = 0.5\n[calibration]\ndevice = "t4"\n',
     ("ov.toml: calibration.device", "got 't4'", "expected 'h100-sxm5-80gb'")),
    ("calibration-not-a-table", "h100-sxm5-80gb",
     OVERLAY_HEAD + 'calibration = 3\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n',
     ("ov.toml: calibration: not a table", "got 3")),
    ("tpu-dataflow", "tpu-v4", OVERLAY_HEAD + '[values]\n"systolic.dataflow" = "xs"\n',
     ("ov.toml: systolic.dataflow: unknown dataflow", "got 'xs'", "expected one of os, ws, is")),
    ("empty", "h100-sxm5-80gb", "", ("ov.toml: empty file", "got 0 bytes")),
    ("not-utf8", "h100-sxm5-80gb", b"\x00\xff\xfe", ("ov.toml: not UTF-8 text", "got byte 0xff")),
    ("invalid-toml", "h100-sxm5-80gb", OVERLAY_HEAD + "[values\n", ("ov.toml:3:", "invalid TOML")),
]


@pytest.mark.parametrize(("hardware", "content", "parts"), [c[1:] for c in OVERLAY_CASES],
                         ids=[c[0] for c in OVERLAY_CASES])
def test_bad_calibration_overlay(tmp_path: Path, capsys: pytest.CaptureFixture[str], hardware: str,
                                 content: str | bytes, parts: tuple[str, ...]) -> None:
    ov = write(tmp_path / "ov.toml", content)
    out_csv = tmp_path / "out.csv"
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", hardware, "--calibration", str(ov), "--csv", str(out_csv))
    one_line(rc, err, *parts)
    assert not out_csv.exists()


@pytest.mark.parametrize("kind", ["folder", "missing"])
def test_overlay_path_that_is_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    path = tmp_path / "ov.toml"
    if kind == "folder":
        path.mkdir()
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", "h100-sxm5-80gb", "--calibration", str(path))
    one_line(rc, err, str(path), "is a folder" if kind == "folder" else "no such calibration file")


def test_shipped_overlays_carry_the_schema() -> None:
    from simulator.hardware import OVERLAY_SCHEMA, load_calibration

    files = sorted((ROOT / "hwmodels" / "measurements").glob("*.calibration.toml"))
    assert files
    for f in files:
        assert load_calibration(f)["source"]
        assert f'schema = "{OVERLAY_SCHEMA}"' in f.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------
# SCALE-Sim topologies: `nodeperf systolic --topology FILE`

TOPOLOGY_CASES: list[tuple[str, str | bytes, tuple[str, ...]]] = [
    ("missing-column", "Layer, M, N, K,\ng1, 64, 64\n", ("t.csv:2:", "malformed row of layer 'g1'", "got 'g1, 64, 64'")),
    ("extra-column", "Layer, M, N, K,\ng1, 64, 64, 64, 64\n", ("t.csv:2:", "malformed row of layer 'g1'")),
    ("not-an-integer", "Layer, M, N, K,\ng1, 64, x, 64,\n", ("t.csv:2:9: N of layer 'g1' is not an integer", "got 'x'")),
    ("float-dimension", "Layer, M, N, K,\ng1, 64, 6.5, 64,\n", ("t.csv:2:9: N of layer 'g1' is not an integer",
                                                                 "got '6.5'")),
    ("zero", "Layer, M, N, K,\ng1, 64, 0, 64,\n", ("t.csv:2:9: N of layer 'g1' must be positive", "got 0")),
    ("negative", "Layer, M, N, K,\ng1, -64, 64, 64,\n", ("t.csv:2:5: M of layer 'g1' must be positive", "got -64")),
    ("empty-name", "Layer, M, N, K,\n, 64, 64, 64,\n", ("t.csv:2:1: empty layer name", "got ''")),
    ("filter-larger-than-input", "Layer, H, W, R, S, C, M, Stride,\nc1, 3, 3, 5, 3, 8, 16, 1,\n",
     ("t.csv:2:", "filter height of layer 'c1' exceeds the input height", "got 5 > 3")),
    ("sparsity", "Layer, M, N, K, Sparsity,\ng1, 64, 64, 64, 2:4,\n",
     ("t.csv:2:", "structured sparsity is not modelled", "got '2:4'")),
    ("empty-file", "", ("t.csv:1:1: no layers", "got an empty topology")),
    ("header-only", "Layer, M, N, K,\n", ("t.csv:1:1: no layers",)),
    ("not-utf8", b"Layer, M, N, K,\ng\xe91, 64, 64, 64,\n", ("t.csv:2:2: not UTF-8 text", "got byte 0xe9")),
    ("binary", b"\xff\xfe\x00\x01", ("t.csv:1:1: not UTF-8 text", "got byte 0xff")),
]


@pytest.mark.parametrize(("content", "parts"), [c[1:] for c in TOPOLOGY_CASES], ids=[c[0] for c in TOPOLOGY_CASES])
def test_bad_topology(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes,
                      parts: tuple[str, ...]) -> None:
    topo = write(tmp_path / "t.csv", content)
    out = tmp_path / "report.csv"
    rc, _, err = run(capsys, "systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology", str(topo),
                     "--out", str(out))
    one_line(rc, err, *[p.replace("t.csv", str(topo)) for p in parts])
    assert not out.exists()


def test_topology_problems_are_listed_one_per_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = write(tmp_path / "t.csv", "Layer, M, N, K,\na, 0, 1, 1\nb, 1, x, 1\nc, 1, 1, -1\n")
    rc, _, err = run(capsys, "systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology", str(topo))
    body = several(rc, err, 3, str(topo))
    assert [ln.strip().split(":")[1] for ln in body] == ["2", "3", "4"]


@pytest.mark.parametrize("kind", ["folder", "missing"])
def test_topology_path_that_is_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    path = tmp_path / "t.csv"
    if kind == "folder":
        path.mkdir()
    rc, _, err = run(capsys, "systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology", str(path))
    one_line(rc, err, str(path), "is a folder" if kind == "folder" else "topology file not found")


SYSTOLIC_ARG_CASES: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("rows-zero", ("--rows", "0"), ("--rows: must be positive", "got 0")),
    ("rows-text", ("--rows", "x"), ("--rows: not an integer", "got 'x'")),
    ("cols-negative", ("--cols", "-8"), ("--cols: must be positive", "got -8")),
    ("bandwidth-nan", ("--dram-words-per-cycle", "nan"), ("--dram-words-per-cycle: must be a finite number > 0",
                                                          "got 'nan'")),
    ("bandwidth-inf", ("--dram-words-per-cycle", "inf"), ("--dram-words-per-cycle: must be a finite number > 0",)),
    ("bandwidth-negative", ("--dram-words-per-cycle", "-1"), ("--dram-words-per-cycle", "got '-1'")),
    ("sram-two-sizes", ("--sram-kib", "1,2"), ("--sram-kib: expected three sizes", "got '1,2'")),
    ("sram-nan", ("--sram-kib", "1,nan,1"), ("--sram-kib (filter): must be a finite number > 0", "got 'nan'")),
    ("word-bytes-zero", ("--word-bytes", "0"), ("--word-bytes: must be positive", "got 0")),
]


@pytest.mark.parametrize(("args", "parts"), [c[1:] for c in SYSTOLIC_ARG_CASES], ids=[c[0] for c in SYSTOLIC_ARG_CASES])
def test_bad_systolic_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                                parts: tuple[str, ...]) -> None:
    topo = write(tmp_path / "t.csv", GOOD_TOPOLOGY)
    base = {"--rows": "8", "--cols": "8"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    argv = ["systolic", "--dataflow", "os", "--topology", str(topo)] + [x for kv in base.items() for x in kv]
    rc, _, err = run(capsys, *argv)
    one_line(rc, err, *parts)


# ------------------------------------------------------------------------------------------------
# output paths of every command that writes a file

def _published_rows() -> Path:
    return PUBLISHED


# command name -> (argv before the output option, the option); {tmp} is replaced by tmp_path
WRITERS: dict[str, tuple[list[str], str]] = {
    "predict-csv": (["predict", GEMM, "--hardware", "h100-sxm5-80gb"], "--csv"),
    "predict-trace": (["predict", GEMM, "--hardware", "h100-sxm5-80gb"], "--trace"),
    "graph-save": (["graph", GEMM], "--save"),
    "systolic-out": (["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology", "{tmp}/t.csv"],
                     "--out"),
    "calibrate-out": (["calibrate", str(PUBLISHED), "--hardware", "t4"], "--out"),
    "measure-out": (["measure", "--no-networks", "--budget", "0.01"], "--out"),
    "validate-plot": (["validate", "--dataset", "published", "--hardware", "t4"], "--plot"),
}
# commands cheap enough to run to the write (calibrate fits for minutes; measure times its suite)
CHEAP = ("predict-csv", "predict-trace", "graph-save", "systolic-out")


@pytest.fixture
def no_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if `nodeperf measure` starts timing (bad outputs must be refused before)."""
    from simulator.calibration import harness

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("measure started timing before checking --out")

    monkeypatch.setattr(harness, "run_cases", refuse)


def _argv(name: str, tmp_path: Path, path: str) -> list[str]:
    write(tmp_path / "t.csv", GOOD_TOPOLOGY)
    head, flag = WRITERS[name]
    return [a.replace("{tmp}", str(tmp_path)) for a in head] + [flag, path]


BAD_PATHS: list[tuple[str, Callable[[Path], str], tuple[str, ...]]] = [
    ("folder", lambda t: str(t / "adir.png"), ("adir.png: is a folder",)),
    ("empty", lambda t: "", (": empty path", "got ''")),
    ("missing-folder", lambda t: str(t / "nowhere" / "out.png"), ("nowhere/out.png: no such folder", "nowhere")),
    ("parent-is-a-file", lambda t: str(t / "afile" / "out.png"), ("afile/out.png: not a folder", "a file")),
]


@pytest.mark.parametrize("bad", BAD_PATHS, ids=[b[0] for b in BAD_PATHS])
@pytest.mark.parametrize("name", list(WRITERS))
def test_bad_output_path_is_refused_up_front(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_measuring: None,
                                             name: str, bad: tuple[str, Callable[[Path], str], tuple[str, ...]]) -> None:
    (tmp_path / "adir.png").mkdir()
    write(tmp_path / "afile", "x")
    rc, out, err = run(capsys, *_argv(name, tmp_path, bad[1](tmp_path)))
    one_line(rc, err, WRITERS[name][1], *bad[2])
    assert out == ""
    assert {p.name for p in tmp_path.iterdir()} == {"adir.png", "afile", "t.csv"}  # nothing written
    assert list((tmp_path / "adir.png").iterdir()) == []


@pytest.mark.parametrize("name", ["predict-csv", "measure-out", "calibrate-out", "graph-save"])
def test_unwritable_place_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      no_measuring: None, name: str) -> None:
    unwritable = Path("/proc")  # no file can be created there, not even by root
    if not unwritable.is_dir():
        pytest.skip("needs /proc")
    rc, _, err = run(capsys, *_argv(name, tmp_path, "/proc/nodeperf-out.csv"))
    one_line(rc, err, WRITERS[name][1], "/proc/nodeperf-out.csv", "cannot create a file in '/proc'")


@pytest.mark.parametrize("name", CHEAP)
def test_device_that_fails_on_write(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    rc, out, err = run(capsys, *_argv(name, tmp_path, "/dev/full"))
    one_line(rc, err, f"{WRITERS[name][1]} /dev/full: cannot write the file", "got No space left on device")


def test_plot_to_a_device_that_fails_on_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    link = tmp_path / "full.png"
    link.symlink_to("/dev/full")
    rc, _, err = run(capsys, *_argv("validate-plot", tmp_path, str(link)))
    one_line(rc, err, f"--plot {link}: cannot write the file", "No space left on device")


def test_measure_write_failure_after_timing_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    from simulator.calibration import harness
    from simulator.calibration.measurements import MeasurementSet

    rows = MeasurementSet.load(PUBLISHED).filter(device="t4")
    monkeypatch.setattr(harness, "run_cases", lambda *a, **k: (rows, []))
    rc, _, err = run(capsys, "measure", "--no-networks", "--out", "/dev/full")
    one_line(rc, err, "--out /dev/full: cannot write the file", "No space left on device")


STDOUT_CONFLICTS: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("predict-csv-json", ["predict", GEMM, "--hardware", "h100-sxm5-80gb", "--csv", "-", "--json"],
     ("--csv -: standard output is taken by --json",)),
    ("predict-csv-trace", ["predict", GEMM, "--hardware", "h100-sxm5-80gb", "--csv", "-", "--trace", "-"],
     ("--trace -: standard output is already taken", "got --csv - and --trace -")),
    ("graph-save-json", ["graph", GEMM, "--save", "-", "--json"], ("--save -: standard output is taken by --json",)),
    ("systolic-out-json", ["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology", "{tmp}/t.csv",
                           "--out", "-", "--json"], ("--out -: standard output is taken by --json",)),
    ("calibrate-out-json", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--out", "-", "--json"],
     ("--out -: standard output is taken by --json",)),
    ("validate-plot-stdout", ["validate", "--dataset", "published", "--hardware", "t4", "--plot", "-"],
     ("--plot -: standard output is not possible", "got '-'")),
    ("validate-plot-format", ["validate", "--dataset", "published", "--hardware", "t4", "--plot", "{tmp}/p.txt"],
     ("--plot", "p.txt: unknown image format", "got 'txt'")),
]


@pytest.mark.parametrize(("argv", "parts"), [c[1:] for c in STDOUT_CONFLICTS], ids=[c[0] for c in STDOUT_CONFLICTS])
def test_standard_output_conflicts(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                   parts: tuple[str, ...]) -> None:
    write(tmp_path / "t.csv", GOOD_TOPOLOGY)
    rc, out, err = run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    one_line(rc, err, *parts)
    assert out == ""


@pytest.mark.parametrize("name", CHEAP)
def test_dash_is_standard_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                 name: str) -> None:
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, *_argv(name, tmp_path, "-"))
    assert rc == 0 and err == "", err
    assert not (tmp_path / "-").exists()
    if name in ("predict-trace", "graph-save"):
        json.loads(out)  # the output alone: one JSON document
    else:
        assert out.splitlines()[0].split(",")[0] in ("name", "LayerID")


def test_written_file_matches_standard_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "predict", GEMM, "--hardware", "h100-sxm5-80gb", "--csv", "-")
    assert rc == 0
    rc, _, _ = run(capsys, "predict", GEMM, "--hardware", "h100-sxm5-80gb", "--csv", str(tmp_path / "o.csv"))
    assert rc == 0 and (tmp_path / "o.csv").read_text(encoding="utf-8") == out


# ------------------------------------------------------------------------------------------------
# numeric options refused at argument parsing

OPTION_CASES: list[tuple[str, list[str], str, str]] = [
    ("regularization-nan", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--regularization", "nan"],
     "--regularization", "got 'nan'"),
    ("regularization-inf", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--regularization", "inf"],
     "--regularization", "got 'inf'"),
    ("regularization-minus-inf", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--regularization=-inf"],
     "--regularization", "got '-inf'"),
    ("regularization-negative", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--regularization=-0.5"],
     "--regularization", "got '-0.5'"),
    ("regularization-text", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--regularization", "lots"],
     "--regularization", "got 'lots'"),
    ("test-fraction-zero", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--test-fraction", "0"],
     "--test-fraction", "got '0'"),
    ("test-fraction-one", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--test-fraction", "1"],
     "--test-fraction", "got '1'"),
    ("test-fraction-nan", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--test-fraction", "nan"],
     "--test-fraction", "got 'nan'"),
    ("seed-negative", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--seed=-1"], "--seed", "got '-1'"),
    ("param-bound-inf", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--param",
                         "efficiency.tensor_peak_fraction=0.1:inf"], "--param", "got '0.1:inf'"),
    ("param-bound-nan", ["calibrate", str(PUBLISHED), "--hardware", "t4", "--param",
                         "efficiency.tensor_peak_fraction=nan:1"], "--param", "got 'nan:1'"),
    ("budget-nan", ["measure", "--out", "{tmp}/m.csv", "--budget", "nan"], "--budget", "got 'nan'"),
    ("budget-inf", ["measure", "--out", "{tmp}/m.csv", "--budget", "inf"], "--budget", "got 'inf'"),
    ("budget-zero", ["measure", "--out", "{tmp}/m.csv", "--budget", "0"], "--budget", "got '0'"),
    ("budget-negative", ["measure", "--out", "{tmp}/m.csv", "--budget=-1"], "--budget", "got '-1'"),
    ("measure-seed-negative", ["measure", "--out", "{tmp}/m.csv", "--seed=-3"], "--seed", "got '-3'"),
    ("passes-zero", ["measure", "--out", "{tmp}/m.csv", "--passes", "0"], "--passes", "got 0"),
    ("passes-fraction", ["measure", "--out", "{tmp}/m.csv", "--passes", "2.5"], "--passes", "got '2.5'"),
]


@pytest.mark.parametrize(("argv", "flag", "got"), [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES])
def test_bad_numeric_option(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_measuring: None, argv: list[str],
                            flag: str, got: str) -> None:
    rc, out, err = run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    one_line(rc, err, flag, got, "expected")
    assert out == "" and not (tmp_path / "m.csv").exists()


def test_calibrator_refuses_non_finite_regularization() -> None:
    from simulator.calibration import Calibrator

    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="regularization; got"):
            Calibrator(regularization=bad)


# ------------------------------------------------------------------------------------------------
# dtypes a device has no rate for: refused the same way on every device kind

DTYPE_CASES: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("gpu-int4", "h100-sxm5-80gb", "int4", ("did you mean 'int8'?",)),
    ("gpu-bf16-turing", "t4", "bf16", ("fp16",)),
    ("gpu-bf16-volta", "v100-sxm2-32gb", "bf16", ("did you mean 'fp16'?",)),
    ("gpu-fp8-ampere", "a100-sxm4-80gb", "fp8_e4m3", ()),
    ("gpu-fp8-cdna2", "mi210", "fp8_e5m2", ()),
    ("tpu-fp64", "tpu-v4", "fp64", ("bf16",)),
    ("tpu-fp16", "tpu-v4", "fp16", ("did you mean 'bf16'?",)),
    ("tpu-v5e-fp64", "tpu-v5e", "fp64", ()),
    ("tpu-edge-fp16", "edge-64x64", "fp16", ()),
    ("tpu-edge-int4", "edge-64x64", "int4", ()),
    ("cpu-int4", "host", "int4", ("fp32",)),
    ("cpu-int8", "host", "int8", ()),
    ("cpu-fp8", "host", "fp8_e4m3", ()),
    ("system-gpu-int4", "dgx-h100", "int4", ()),
]


@pytest.mark.parametrize(("hardware", "dtype", "extra"), [c[1:] for c in DTYPE_CASES], ids=[c[0] for c in DTYPE_CASES])
@pytest.mark.parametrize("engine", ["analytical", "des"])
def test_dtype_without_a_rate_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], hardware: str, dtype: str,
                                         extra: tuple[str, ...], engine: str) -> None:
    out_csv = tmp_path / "out.csv"
    rc, _, err = run(capsys, "predict", GEMM, "--hardware", hardware, "--dtype", dtype, "--engine", engine,
                     "--csv", str(out_csv))
    device = "h100-sxm5-80gb" if hardware == "dgx-h100" else hardware
    one_line(rc, err, f"{device}: compute.tensor_flops_per_s: no rate for dtype {dtype!r}", f"got {dtype!r}",
             "expected one of", *extra)
    assert not out_csv.exists()


def test_dtype_with_only_a_vector_rate_is_accepted_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    # fp32 contractions: tensor-core-less GPUs run them on the SIMT units, a bf16/int8 TPU on its vector unit
    for hardware in ("t4", "edge-64x64", "host"):
        rc, _, err = run(capsys, "predict", GEMM, "--hardware", hardware, "--dtype", "fp32")
        assert rc == 0, err


# ------------------------------------------------------------------------------------------------
# huge systolic arrays and layers: exact arithmetic, never a negative or NaN utilisation


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize(("rows", "cols", "dims"), [
    (1_000_000, 1_000_000, (64, 64, 64)),
    (1_000_000, 1_000_000, (10**9, 10**9, 10**9)),
    (8, 8, (10**9, 10**9, 10**9)),
    (1, 1, (1, 1, 1)),
    (3, 5, (2**40, 7, 2**33)),
])
def test_huge_systolic_arrays_give_utilisation_within_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             dataflow: str, rows: int, cols: int,
                                                             dims: tuple[int, int, int]) -> None:
    topo = write(tmp_path / "t.csv", "Layer, M, N, K,\ng1, {}, {}, {},\n".format(*dims))
    rc, out, err = run(capsys, "systolic", "--rows", str(rows), "--cols", str(cols), "--dataflow", dataflow,
                       "--topology", str(topo), "--json", "--dram-words-per-cycle", "0.001")
    assert rc == 0, err
    layer = json.loads(out)["layers"][0]
    for key in ("overall_util_pct", "mapping_eff_pct", "compute_util_pct"):
        v = layer[key]
        assert math.isfinite(v) and 0.0 <= v <= 100.0 + 1e-9, (key, v)
    m, n, k = dims
    assert layer["total_cycles"] >= layer["compute_cycles"] >= 0 and layer["stall_cycles"] >= 0
    # the overall utilisation is exactly the MACs over the PE-cycles (one rounding)
    assert layer["overall_util_pct"] == pytest.approx(100 * m * n * k / (max(layer["total_cycles"], 1) * rows * cols),
                                                       rel=1e-12)


def test_library_switches_to_exact_integers_instead_of_wrapping() -> None:
    from hwmodels.systolic import gemm_cycles

    r = gemm_cycles(1_000_000, 1_000_000, "ws", 10**9, 10**9, 10**9, fold_average="scalesim")
    assert int(r.compute_cycles) == 1_002_999_997_999_999
    assert 99.0 < float(r.overall_util_pct) <= 100.0
    small = gemm_cycles([8, 10**6], 8, "os", 64, 64, 64)  # a broadcast sweep keeps int64 where it fits
    assert small.compute_cycles.dtype.kind == "i" and (small.overall_util_pct >= 0).all()

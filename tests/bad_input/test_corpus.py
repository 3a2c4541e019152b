"""The generated bad-input corpus: every CLI command, every flag, every file argument, every TOML table.

Cases are generated, not written out: each option of every command (introspected from the real
argument parser) with empty, unknown, negative, NaN and overflowing values; each file argument
(hardware, node, overlay, scenario, topology, energy table, measurement CSV, saved graph, prices,
experiment) as a missing path, a folder, ``/dev/zero``, a named pipe, a symlink loop, a broken link,
an empty, blank, binary, NUL-carrying, 5,000-level nested and 300 MiB file; and each key of a device
and a scenario file deleted, misspelt and given a wrong type. Every case runs ``nodeperf`` in-process
(``simulator.cli.main``) under a watchdog alarm, from an empty working folder, and checks:

- no traceback and no hang (the alarm), and exit code 0 or 2;
- no silent acceptance: a value that cannot be right (an empty or unknown name, ``nan`` for a
  number, a file that is not one) must give exit code 2;
- exit code 2 comes with ``nodeperf: error: `` and one located line (or a count line and located
  lines for several problems) naming where: the flag, the file or the key.

A few cases run through a real subprocess too (the installed entry point, with a timeout). The sweep
area's faults (huge grids, filter expressions, stores) are in ``test_sweep_faults.py``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hwmodels.catalog import DEVICES_DIR
from simulator.cli import main
from tests.bad_input.contract import PREFIX

ROOT = Path(__file__).resolve().parents[2]
GEMM = "gemm:m=64,n=64,k=64"
H100 = (DEVICES_DIR / "h100-sxm5-80gb.toml").read_text(encoding="utf-8")
WATCHDOG_S = 60

SCENARIO = """name = "tiny"
frames = 5

[[tasks]]
name = "camera"
model = "gemm:m=64,n=64,k=64"
device = "gpu"
rate = "30 Hz"
deadline = "5 ms"
priority = 5
"""
TOPOLOGY = "Layer, M, N, K,\ng1, 64, 64, 64,\n"
REQUESTS = ("id,arrival_s,input_len,output_len,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,replica,preemptions,"
            "cached_tokens\n0,0,64,4,0.01,0.03,0.01,0.0067,0.03,0,0,0\n1,0.5,64,4,0.51,0.53,0.01,0.0067,0.03,0,0,0\n")
MEASUREMENTS = ROOT / "hwmodels" / "measurements" / "published_gpu.csv"


# ------------------------------------------------------------------------------------------------
# running one case


class Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hang(f"no answer within {WATCHDOG_S} s")


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr of ``nodeperf argv`` in-process, under a watchdog alarm (a hang fails)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(WATCHDOG_S)
    try:
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    _, err = capsys.readouterr()
    return rc, err


def check(rc: int, err: str, *where: str, must_fail: bool) -> None:
    """The corpus contract (see the module docstring); one of ``where`` (the flag, the file, the value as
    typed) must appear in the located line(s)."""
    if os.environ.get("NODEPERF_CORPUS_LOG"):  # figures for the issue: exit code and lines per case
        with open(os.environ["NODEPERF_CORPUS_LOG"], "a", encoding="utf-8") as fh:
            fh.write(f"{rc}\t{'Traceback' in err}\t{len(err.rstrip(chr(10)).splitlines())}\t{must_fail}\n")
    assert "Traceback" not in err, err
    assert rc in (0, 2), f"exit code {rc}: {err}"
    if must_fail:
        assert rc == 2, f"silently accepted (exit 0): {err!r}"
    if rc != 2:
        return
    lines = err.rstrip("\n").split("\n")
    assert lines[0].startswith(PREFIX), err
    if " problems in " in lines[0]:  # several problems: a count line, then located lines
        assert all(ln.startswith("  ") and ":" in ln for ln in lines[1:]), err
    else:
        assert len(lines) == 1, f"more than one line for one problem: {err}"
    assert any(w and w in err for w in where), f"none of {where!r} named in {err!r}"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder (outputs named by a bad value land there) with the good inputs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    (tmp_path / "topology.csv").write_text(TOPOLOGY, encoding="utf-8")
    (tmp_path / "requests.csv").write_text(REQUESTS, encoding="utf-8")
    return tmp_path


# ------------------------------------------------------------------------------------------------
# 1. every option of every command with values that cannot be right (or that are refused cleanly)

#: A valid command line per command (path of subcommands), to which one bad option is added.
BASES: dict[str, list[str]] = {
    "models": ["models"],
    "graph": ["graph", GEMM],
    "hardware": ["hardware", "show", "h100-sxm5-80gb"],
    "predict": ["predict", GEMM, "--hardware", "h100-sxm5-80gb"],
    "systolic": ["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology", "topology.csv"],
    "measure": ["measure", "--suite", "quick"],
    "calibrate": ["calibrate", str(MEASUREMENTS), "--hardware", "h100-sxm5-80gb", "--out", "ov.toml"],
    "validate": ["validate", str(MEASUREMENTS), "--hardware", "h100-sxm5-80gb"],
    "tune": ["tune", GEMM, "--hardware", "h100-sxm5-80gb"],
    "plot roofline": ["plot", "roofline", GEMM, "--hardware", "h100-sxm5-80gb", "--out", "f.png"],
    "plot breakdown": ["plot", "breakdown", GEMM, "--hardware", "h100-sxm5-80gb", "--out", "f.png"],
    "realtime": ["realtime", "scenario.toml", "--hardware", "l4"],
    "partition": ["partition", GEMM, "--hardware", "jetson-agx-orin-64gb"],
    "plot serving": ["plot", "serving", "requests.csv", "--out", "f.png"],
    "serve": ["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths", "fixed:in=64,out=4", "--requests", "4"],
}
#: Options whose value is free text (a title, a label): any string is right.
FREE_TEXT = {"--title", "--device-name"}
#: Commands whose options are only tried with values refused while parsing (a value that parses
#: would start a real measurement or search).
PARSE_ONLY = {"measure", "calibrate", "tune", "validate"}
#: Values tried on every option: (id, value, must be refused for a typed/choice option, for any option)
VALUES = [("empty", "", True), ("unknown", "zzz-not-a-value", True), ("negative", "-1", False),
          ("nan", "nan", True), ("overflow", "1e999", False)]
#: Options of the sweep area (their faults are in test_sweep_faults.py) and output paths (writers are
#: covered by test_hardware_inputs.py).
SKIP = {"--out", "--csv", "--save", "--trace", "--plot", "--json", "--verbose", "--version"}


def _options() -> Iterator[tuple[str, str, argparse.Action]]:
    parser = importlib.import_module("simulator.cli.main").build_parser()

    def walk(p: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[str, str, argparse.Action]]:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    yield from walk(sp, [*path, name])
            elif a.option_strings and a.nargs != 0 and a.option_strings[-1] not in SKIP:
                yield " ".join(path), a.option_strings[-1], a

    yield from walk(parser, [])


def _option_cases() -> list[pytest.param]:
    cases = []
    for cmd, flag, action in _options():
        if cmd not in BASES:
            continue
        typed = action.type is not None or action.choices is not None
        for vid, value, strict in VALUES:
            if cmd in PARSE_ONLY and not (typed and vid in ("empty", "unknown", "nan")):
                continue
            if not typed and vid in ("negative", "overflow"):
                continue
            must_fail = strict and flag not in FREE_TEXT and (typed or vid != "nan")
            cases.append(pytest.param(cmd, flag, value, must_fail, id=f"{cmd.replace(' ', '-')}{flag}={vid}"))
    return cases


OPTION_CASES = _option_cases()


@pytest.mark.parametrize(("cmd", "flag", "value", "must_fail"), OPTION_CASES)
def test_option_value(work: Path, capsys: pytest.CaptureFixture[str], cmd: str, flag: str, value: str,
                      must_fail: bool) -> None:
    rc, err = run(capsys, [*BASES[cmd], f"{flag}={value}"])
    check(rc, err, flag, repr(value), value if len(value) >= 2 else "", must_fail=must_fail)


def test_the_option_corpus_covers_every_command_but_the_sweep_area() -> None:
    commands = {c for c, _, _ in _options()}
    assert commands - {"sweep", "plot pareto", "plot heatmap"} <= set(BASES), commands - set(BASES)
    assert len(OPTION_CASES) >= 400


# ------------------------------------------------------------------------------------------------
# 2. every file argument as something that is not a good file


def _deep_toml() -> str:
    return "a = " + "[" * 5000 + "]" * 5000 + "\n"


def _make(kind: str, path: Path, *, toml: bool) -> str:
    """Make ``path`` the defect ``kind``; return the path to pass."""
    if kind == "missing":
        pass
    elif kind == "folder":
        path.mkdir()
    elif kind == "dev-zero":
        return "/dev/zero"
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink-loop":
        other = path.with_name(path.name + ".loop")
        os.symlink(other, path)
        os.symlink(path, other)
    elif kind == "broken-link":
        os.symlink(path.with_name("nowhere" + path.suffix), path)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "blank":
        path.write_bytes(b"\n   \n\t\n")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "nul":
        path.write_bytes(b"name = \"x\x00y\"\n" if toml else b"a,b\n1,\x002\n")
    elif kind == "deep":
        path.write_text(_deep_toml() if toml else "[" * 5000 + "]" * 5000, encoding="utf-8")
    elif kind == "huge":
        with open(path, "wb") as fh:  # sparse: 300 MiB that take no disk
            fh.truncate(300 * 1024 * 1024)
    else:
        raise AssertionError(kind)
    return str(path)


DEFECTS = ["missing", "folder", "dev-zero", "fifo", "symlink-loop", "broken-link", "empty", "blank", "binary",
           "nul", "deep", "huge"]

#: (id, file name, argv with {f} for the file): every command's file arguments
FILE_ARGS = [
    ("predict-hardware", "dev.toml", ["predict", GEMM, "--hardware", "{f}"]),
    ("hardware-show", "dev.toml", ["hardware", "show", "{f}"]),
    ("predict-calibration", "ov.toml", ["predict", GEMM, "--hardware", "h100-sxm5-80gb", "--calibration", "{f}"]),
    ("predict-model-json", "g.json", ["predict", "{f}", "--hardware", "h100-sxm5-80gb"]),
    ("graph-model-json", "g.json", ["graph", "{f}"]),
    ("realtime-scenario", "s.toml", ["realtime", "{f}", "--hardware", "l4"]),
    ("realtime-node", "node.toml", ["realtime", "scenario.toml", "--hardware", "{f}"]),
    ("realtime-overlay", "ov.toml", ["realtime", "scenario.toml", "--hardware", "l4", "--overlay", "{f}"]),
    ("partition-node", "node.toml", ["partition", GEMM, "--hardware", "{f}"]),
    ("systolic-topology", "t.csv", ["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology", "{f}"]),
    ("systolic-energy", "e.toml", ["systolic", "--rows", "8", "--cols", "8", "--dataflow", "os", "--topology",
                                   "topology.csv", "--energy", "{f}"]),
    ("calibrate-measurements", "m.csv", ["calibrate", "{f}", "--hardware", "h100-sxm5-80gb", "--out", "ov.toml"]),
    ("validate-measurements", "m.csv", ["validate", "{f}", "--hardware", "h100-sxm5-80gb"]),
    ("validate-calibration", "ov.toml", ["validate", str(MEASUREMENTS), "--hardware", "h100-sxm5-80gb",
                                         "--calibration", "{f}"]),
    ("tune-prices", "p.toml", ["tune", GEMM, "--hardware", "h100-sxm5-80gb", "--prices", "{f}"]),
    ("sweep-experiment", "x.toml", ["sweep", "{f}", "--out", "r.sqlite"]),
    ("serve-trace", "trace.csv", ["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--arrival", "trace:{f}"]),
    ("serve-lengths", "lengths.csv", ["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--lengths", "{f}",
                                      "--requests", "2"]),
    ("plot-serving", "runs.csv", ["plot", "serving", "{f}", "--out", "f.png"]),
]


def _file_cases() -> list[pytest.param]:
    return [pytest.param(name, argv, fname, kind, id=f"{aid}-{kind}") for aid, fname, argv in FILE_ARGS
            for kind in DEFECTS for name in [aid]]


@pytest.mark.parametrize(("aid", "argv", "fname", "kind"), _file_cases())
def test_file_argument(work: Path, capsys: pytest.CaptureFixture[str], aid: str, argv: list[str], fname: str,
                       kind: str) -> None:
    path = _make(kind, work / fname, toml=fname.endswith(".toml"))
    rc, err = run(capsys, [a.replace("{f}", path) for a in argv])
    # name the file: its path, or its name (a resolved or relative spelling)
    check(rc, err, Path(path).name if kind != "dev-zero" else "/dev/zero", must_fail=True)


# ------------------------------------------------------------------------------------------------
# 3. every key of a device and a scenario file: missing, misspelt (did you mean), wrong type

_TOP_KEY = re.compile(r"^([a-z_]+)\s*=", re.M)


def _device_keys() -> list[str]:
    head = H100.split("\n[", 1)[0]
    return [k for k in _TOP_KEY.findall(head) if k not in ("schema", "description", "notes")]


def _scenario_task_keys() -> list[str]:
    return [k for k in _TOP_KEY.findall(SCENARIO.split("[[tasks]]", 1)[1])]


def _toml_key_cases() -> list[pytest.param]:
    cases = []
    for k in _device_keys():
        cases += [pytest.param("device", k, op, id=f"device-{k}-{op}") for op in ("missing", "misspelt", "wrong-type")]
    for k in _scenario_task_keys():
        cases += [pytest.param("task", k, op, id=f"task-{k}-{op}") for op in ("missing", "misspelt", "wrong-type")]
    for table in ("memory", "power", "compute", "clock"):
        cases.append(pytest.param("device-table", table, "unknown-key", id=f"device-[{table}]-unknown-key"))
    return cases


def _edit(text: str, key: str, op: str, header: str = "") -> str:
    m = re.search(rf"^{re.escape(key)}\s*=.*$", text.split(header, 1)[-1] if header else text, re.M)
    assert m is not None, key
    line = m.group(0)
    new = {"missing": "", "misspelt": line.replace(key, key[:-1] + key[-1] * 2, 1),
           "wrong-type": f"{key} = [[1], [2]]"}[op]
    return text.replace(line, new, 1) if not header else header.join(
        [text.split(header, 1)[0], text.split(header, 1)[1].replace(line, new, 1)])


@pytest.mark.parametrize(("where", "key", "op"), _toml_key_cases())
def test_toml_key(work: Path, capsys: pytest.CaptureFixture[str], where: str, key: str, op: str) -> None:
    if where == "device":
        f = work / "dev.toml"
        f.write_text(_edit(H100, key, op), encoding="utf-8")
        argv = ["predict", GEMM, "--hardware", str(f)]
    elif where == "device-table":
        f = work / "dev.toml"
        text, n = re.subn(rf"^\[\[?{key}(\.[a-z0-9_]+)?\]\]?$", lambda m: m.group(0) + "\nbogus_key = 1", H100,
                          count=1, flags=re.M)
        assert n == 1, key
        f.write_text(text, encoding="utf-8")
        argv, key = ["predict", GEMM, "--hardware", str(f)], "bogus_key"
    else:
        f = work / "s.toml"
        f.write_text(_edit(SCENARIO, key, op, header="[[tasks]]"), encoding="utf-8")
        argv = ["realtime", str(f), "--hardware", "l4"]
    rc, err = run(capsys, argv)
    # a missing optional key is no error: then the run must succeed
    check(rc, err, f.name, must_fail=op != "missing")
    if rc == 2 and op == "misspelt":
        assert "did you mean" in err or "missing" in err, err


@pytest.mark.parametrize("argv", [
    ["predict", GEMM, "--hardware", "tpu-v4"],
    ["partition", GEMM, "--hardware", "tpu-v4"],
    ["plot", "roofline", GEMM, "--hardware", "tpu-v4", "--out", "f.png"],
    ["plot", "breakdown", GEMM, "--hardware", "h100-sxm5-80gb", "--hardware", "tpu-v4", "--out", "f.png"],
], ids=["predict", "partition", "plot-roofline", "plot-breakdown"])
def test_a_framework_on_a_device_it_does_not_run_on(work: Path, capsys: pytest.CaptureFixture[str],
                                                    argv: list[str]) -> None:
    """Every command that takes --framework refuses a TensorRT engine on a TPU (one line, exit 2, no figure)."""
    rc, err = run(capsys, [*argv, "--framework", "tensorrt"])
    check(rc, err, "--framework tensorrt", must_fail=True)
    assert "does not run on tpu-v4 (Google tpu)" in err and "expected one of maxtext, maxtext-cf, maxtext-cf-sc, maxtext-sc, maxtext-serial, vllm, xla" in err, err
    assert not (work / "f.png").exists()
    rc, err = run(capsys, [*argv, "--framework", "xla"])  # a profile that runs there is accepted
    assert rc == 0, err


# ------------------------------------------------------------------------------------------------
# 4. a few cases through the real entry point (a subprocess with a timeout): same answers


@pytest.mark.parametrize(("argv", "where"), [
    (["predict", GEMM, "--hardware", "/dev/zero"], "/dev/zero"),
    (["realtime", "/dev/zero", "--hardware", "l4"], "/dev/zero"),
    (["predict", GEMM, "--hardware", "tpu-v4", "--framework", "tensorrt"], "--framework tensorrt"),
    (["realtime", "scenario.toml", "--hardware", "l4", "--frames", "0"], "--frames"),
], ids=["hardware-dev-zero", "scenario-dev-zero", "framework-on-tpu", "frames-zero"])
def test_through_a_subprocess(work: Path, argv: list[str], where: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = subprocess.run([sys.executable, "-m", "simulator.cli", *argv], capture_output=True, text=True, timeout=120,
                         env=env, cwd=work)
    check(got.returncode, got.stderr, where, must_fail=True)

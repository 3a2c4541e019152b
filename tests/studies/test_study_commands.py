"""What every study shares: one configuration loader with one rule for ``[reduced]``, and one command that
runs from any working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from studies._cli import REPO_ROOT, load_config, out_dir

STUDIES = sorted(p.parent.name for p in (REPO_ROOT / "studies").glob("*/config.toml"))


def test_twelve_studies_each_one_command():
    assert len(STUDIES) == 12, STUDIES
    for name in STUDIES:
        folder = REPO_ROOT / "studies" / name
        assert (folder / "run.py").is_file() and (folder / "__main__.py").is_file(), name
        assert f"from studies.{name}.run import main" in (folder / "__main__.py").read_text(), name
        assert out_dir(folder) == REPO_ROOT / "out" / name


@pytest.mark.parametrize("name", STUDIES)
def test_run_py_runs_from_any_folder(name, tmp_path):
    """``python studies/NAME/run.py`` from a folder outside the repository finds the packages and parses."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "studies" / name / "run.py"), "--help"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for opt in ("--reduced", "--out", "--figures", "--plot-only"):
        assert opt in proc.stdout, (name, opt)
    assert f"default out/{name}/ under the repository root" in " ".join(proc.stdout.split())


def test_a_whole_study_from_another_folder(tmp_path):
    """The smallest whole run, as a user types it from elsewhere: CSV and figure land under --out."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = tmp_path / "res"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "studies" / "decode_scaling" / "run.py"), "--reduced",
                           "--out", "res"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"9 rows -> {Path('res') / 'results.csv'}",
                                        f"figure -> {Path('res') / 'decode_scaling.png'}"]
    assert (out / "results.csv").read_text().count("\n") == 1 + 9 and (out / "decode_scaling.png").stat().st_size > 10_000


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_load_config_applies_reduced_by_the_shape_of_each_key(tmp_path):
    p = _write(tmp_path, """
devices = ["a", "b", "c"]
frames = 100
[training]
gpus = [64, 128, 256]
tp = [1, 2]
[[families]]
name = "x"
[[families]]
name = "y"
[[workloads]]
name = "w1"
[reduced]
devices = ["a"]
frames = 3
families = ["y"]
workloads = [{ name = "w2" }]
[reduced.training]
gpus = [64]
""")
    full = load_config(p)
    assert full["devices"] == ["a", "b", "c"] and "reduced" not in full and len(full["families"]) == 2
    small = load_config(p, reduced=True)
    assert small["devices"] == ["a"] and small["frames"] == 3                 # replaced
    assert small["training"] == {"gpus": [64], "tp": [1, 2]}                  # a table: updated
    assert small["families"] == [{"name": "y"}]                               # named tables: narrowed by name
    assert small["workloads"] == [{"name": "w2"}]                             # tables for tables: replaced
    assert "reduced" not in small


def test_load_config_errors_are_located(tmp_path):
    p = _write(tmp_path, 'devices = ["a"]\n[reduced]\ndevice = ["a"]\n')
    with pytest.raises(ValueError, match=r"config\.toml: reduced\.device: no such key to reduce; expected one of "
                                         r"devices; did you mean 'devices'\?"):
        load_config(p, reduced=True)
    p = _write(tmp_path, '[[families]]\nname = "NVIDIA GPU"\n[reduced]\nfamilies = ["NVIDIA GPUs"]\n')
    with pytest.raises(ValueError, match=r"reduced\.families: unknown name; got 'NVIDIA GPUs'; expected one of "
                                         r"NVIDIA GPU; did you mean 'NVIDIA GPU'\?"):
        load_config(p, reduced=True)
    p = _write(tmp_path, 'devices = ["a"]\nframes =\n')
    with pytest.raises(ValueError, match=r"config\.toml: Invalid value \(at line 2, column 9\); expected a study "
                                         r"configuration in TOML"):
        load_config(p)


def test_a_broken_configuration_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from studies.decode_scaling import run

    monkeypatch.setattr(run, "HERE", tmp_path / "decode_scaling")
    (tmp_path / "decode_scaling").mkdir()
    (tmp_path / "decode_scaling" / "config.toml").write_text("batches = [1\n")
    assert run.main(["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"decode_scaling: error: {tmp_path / 'decode_scaling' / 'config.toml'}: ")


def test_a_study_shows_progress_over_its_cases(tmp_path, capsys):
    """``--progress`` draws one bar over the study's cases on standard error (3 devices, the B200 among them, x 3 batches in the
    reduced decode_scaling); ``--no-progress`` draws none; the standard output is the same."""
    from studies.decode_scaling.run import main

    assert main(["--reduced", "--out", str(tmp_path / "a"), "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "decode_scaling: 100%" in err and "9/9" in err and "case" in err
    assert main(["--reduced", "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    out_quiet, err_quiet = capsys.readouterr()
    assert err_quiet == "" and out_quiet.replace("/b/", "/a/") == out

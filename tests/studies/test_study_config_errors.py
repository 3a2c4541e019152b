"""Bad study configurations: each is one located line (the file and the dotted key path) and exit code 2,
never a traceback, and it fails before any work (every case here would otherwise run the full study).

The bad configurations are generated from each study's own config.toml and its declared SCHEMA: every
required top-level key removed, every declared key of the wrong type, every array empty, every size
zero or negative, and unknown catalog names (with the near match)."""

from __future__ import annotations

import importlib
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from studies._cli import _NAME_KINDS, REPO_ROOT

STUDIES = ["av_perception", "bandwidth_scaling", "decode_scaling", "disaggregation", "energy_generations",
           "hetero_placement", "parallelism", "precision_scaling", "serving_capacity", "slo_frontier", "systolic_design",
           "training_at_scale"]


def _toml_value(v: Any) -> str:
    """``v`` as an inline TOML value (strings via JSON escapes, which TOML basic strings share)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _write(cfg: dict[str, Any], path: Path) -> Path:
    path.write_text("".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in cfg.items()))
    return path


def _base(study: str) -> dict[str, Any]:
    with open(REPO_ROOT / "studies" / study / "config.toml", "rb") as f:
        cfg = tomllib.load(f)
    cfg.pop("reduced", None)
    return cfg


def _schema(study: str) -> dict[str, str]:
    return importlib.import_module(f"studies.{study}.run").SCHEMA


def _set(cfg: dict[str, Any], path: str, value: Any) -> str:
    """Set the key at schema ``path`` (``[]`` = the first table of the array) in ``cfg``; its located name."""
    node = cfg
    parts = path.lstrip("?").split(".")
    for part in parts[:-1]:
        node = node[part[:-2]][0] if part.endswith("[]") else node[part]
    node[parts[-1]] = value
    return path.lstrip("?").replace("[]", "[0]")


def _cases() -> list[tuple[str, str, Any, str]]:
    """(study, schema path, bad value, what the message must also say)."""
    out = []
    for study in STUDIES:
        for path, kind in _schema(study).items():
            if path.startswith("?"):
                continue
            if kind.endswith("[]"):
                out += [(study, path, "8", "non-empty array"), (study, path, [], "non-empty array")]
                elem = kind[:-2]
                if elem.startswith(("int", "num")):
                    out.append((study, path, [1, -4], "[1]"))
                elif elem == "device":
                    out.append((study, path, ["h100-sxm5-80gbb"], "did you mean 'h100-sxm5-80gb'?"))
            elif kind.startswith(("int", "num")):
                out += [(study, path, "8", "number" if kind.startswith("num") else "integer"),
                        (study, path, -1, "0")]
                if kind.endswith(">0"):
                    out.append((study, path, 0, "> 0"))
            elif kind == "bool":
                out.append((study, path, "yes", "true or false"))
            elif kind == "table":
                out.append((study, path, 1, "a table"))
            else:
                out += [(study, path, 12, "expected"), (study, path, "", "expected")]
            if kind == "device":
                out.append((study, path, "h100-sxm5-80gbb", "did you mean 'h100-sxm5-80gb'?"))
            elif kind == "node":
                out.append((study, path, "h100-plus-systolic129", "did you mean 'h100-plus-systolic128'?"))
            elif kind == "model":
                out.append((study, path, "llama-2-7bb", "did you mean"))
            name_kind = kind.removesuffix("[]")
            if name_kind in _NAME_KINDS or name_kind.startswith("{"):
                # the configuration's own name less its last letter: refused, the real name suggested
                good = _get(_base(study), path)
                good = good[0] if isinstance(good, list) else good
                bad = [good[:-1]] if kind.endswith("[]") else good[:-1]
                out.append((study, path, bad, f"did you mean {good!r}"))
    return out


def _get(cfg: dict[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.lstrip("?").split("."):
        node = node[part[:-2]][0] if part.endswith("[]") else node[part]
    return node


def _run(study: str, config: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    main = importlib.import_module(f"studies.{study}.run").main
    rc = main(["--config", str(config), "--out", str(out)])
    return rc, capsys.readouterr().err


def _assert_located(rc: int, err: str, config: Path, key: str, also: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err  # one line
    assert str(config) in err and (f"{key}: " in err or f"{key}[" in err), err
    assert also in err, err


@pytest.mark.parametrize("study", STUDIES)
def test_missing_top_level_key(study: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    required = {p.split(".")[0].removesuffix("[]") for p in _schema(study) if not p.startswith("?")}
    assert required, study
    for key in sorted(required):
        cfg = _base(study)
        del cfg[key]
        config = _write(cfg, tmp_path / f"no-{key}.toml")
        rc, err = _run(study, config, tmp_path / "out", capsys)
        _assert_located(rc, err, config, key, "missing key")
    assert not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.parametrize("study,path,value,also", _cases(),
                         ids=lambda x: x if isinstance(x, str) and x and "'" not in x else None)
def test_bad_value(study: str, path: str, value: Any, also: str, tmp_path: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _base(study)
    key = _set(cfg, path, value)
    config = _write(cfg, tmp_path / "bad.toml")
    rc, err = _run(study, config, tmp_path / "out", capsys)
    _assert_located(rc, err, config, key, also)
    shown = value[-1] if isinstance(value, list) and value else value  # an array's bad element
    assert f"got {shown!r}" in err, err
    assert not (tmp_path / "out").exists()


def test_every_study_declares_its_keys() -> None:
    """Every top-level key of each config.toml is declared, so none is used unchecked."""
    for study in STUDIES:
        declared = {p.lstrip("?").split(".")[0].removesuffix("[]") for p in _schema(study)}
        assert set(_base(study)) <= declared, study


def test_the_committed_configurations_pass(tmp_path: Path) -> None:
    from studies._cli import check_config, load_config

    for study in STUDIES:
        path = REPO_ROOT / "studies" / study / "config.toml"
        for reduced in (False, True):
            check_config(load_config(path, reduced), _schema(study), path)  # raises if not


@pytest.mark.parametrize(("study", "path", "value"), [
    ("decode_scaling", "dtype", "bfloat16"),  # an alias parse_dtype takes
    ("energy_generations", "workloads[].phase", "forward"),  # resnet50's phases: forward, train
    ("parallelism", "training.systems", ["dgx-h100", "h100-sxm5-80gb"]),  # a system or a device
])
def test_names_the_real_sets_accept(study: str, path: str, value: Any, tmp_path: Path) -> None:
    from studies._cli import check_config, load_config

    cfg = _base(study)
    _set(cfg, path, value)
    config = _write(cfg, tmp_path / "ok.toml")
    check_config(load_config(config), _schema(study), config)  # no error


def test_a_phase_the_model_lacks_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _base("hetero_placement")
    assert cfg["workloads"][0]["model"] == "resnet50"
    cfg["workloads"][0]["phase"] = "decode"
    config = _write(cfg, tmp_path / "bad.toml")
    rc, err = _run("hetero_placement", config, tmp_path / "out", capsys)
    _assert_located(rc, err, config, "workloads[0].phase", "expected a phase of model 'resnet50': forward, train")


def test_a_power_mode_the_node_lacks_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _base("av_perception")
    cfg["power_modes"] = ["15w", "45w"]
    config = _write(cfg, tmp_path / "bad.toml")
    rc, err = _run("av_perception", config, tmp_path / "out", capsys)
    _assert_located(rc, err, config, "power_modes[1]", f"expected a power mode of {cfg['node']!r}: 15w, 30w, 50w, 60w")

"""The GPU timing scripts agree when there is nothing to time: the reason on stderr, exit status 1."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _main(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


@pytest.mark.parametrize("name", ["bench_fp8_linear_shapes", "bench_expert_gemm"])
def test_no_cuda_device_exits_1_with_the_reason_on_stderr(name, monkeypatch, capsys) -> None:
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert _main(name)([]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "no CUDA device" in err and "nothing to time" in err


@pytest.mark.parametrize("name", ["bench_fp8_linear_shapes", "bench_expert_gemm"])
def test_no_torch_exits_1_with_the_reason_on_stderr(name, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert _main(name)([]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "torch is not importable: nothing to time\n"

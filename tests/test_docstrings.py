"""Every ``>>>`` example in the docstrings of nodeperf, simulator, hwmodels and workloads runs and prints what it says.

The examples are found with :class:`doctest.DocTestFinder` over every module of the four packages (one test
per docstring that has examples, named after it) and run from the repository root, since some name files
relative to it. A module or an example that needs an optional extra that is not installed is skipped with
the extra named; any other import failure is an error.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nodeperf", "simulator", "hwmodels", "workloads")
#: Top-level modules of the optional extras (pyproject.toml's optional-dependencies) an example may need.
OPTIONAL = {"torch": "torch", "onnx": "onnx", "onnxscript": "onnx", "transformers": "test", "pandas": "pandas",
            "dask": "dask", "distributed": "dask", "pyarrow": "parquet"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)


def _module_names() -> list[str]:
    names = []
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        names.append(pkg_name)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg_name + ".")
                  if not m.name.endswith(".__main__")]  # running a __main__ module runs the command
    return sorted(names)


def _missing_extra(exc: ModuleNotFoundError) -> str | None:
    top = (exc.name or "").split(".")[0]
    return f"needs the optional {top!r} ({OPTIONAL[top]} extra), not installed" if top in OPTIONAL else None


def _collect() -> tuple[list[object], dict[str, str]]:
    """(pytest params, one per docstring with examples; module name -> reason it was skipped)."""
    finder = doctest.DocTestFinder()
    params, skipped = [], {}
    for name in _module_names():
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            reason = _missing_extra(exc)
            if reason is None:
                raise
            skipped[name] = reason
            params.append(pytest.param(name, None, id=name, marks=pytest.mark.skip(reason=f"{name}: {reason}")))
            continue
        for test in finder.find(mod, name):
            if test.examples:
                params.append(pytest.param(name, test.name, id=test.name))
    return params, skipped


PARAMS, SKIPPED_MODULES = _collect()


def _find(module: str, test_name: str) -> doctest.DocTest:
    tests = [t for t in doctest.DocTestFinder().find(importlib.import_module(module), module) if t.name == test_name]
    assert len(tests) == 1, f"{module}: {len(tests)} docstrings named {test_name}"
    return tests[0]


def _needed_extras(test: doctest.DocTest) -> list[str]:
    tops = set()
    for ex in test.examples:
        if ex.options.get(doctest.SKIP):
            continue
        for m in _IMPORT.finditer(ex.source):
            tops.add((m.group(1) or m.group(2)).split(".")[0])
    return sorted(t for t in tops if t in OPTIONAL and importlib.util.find_spec(t) is None)


@pytest.mark.parametrize(("module", "test_name"), PARAMS)
def test_docstring_examples(module, test_name, monkeypatch):
    test = _find(module, test_name)
    missing = _needed_extras(test)
    if missing:
        pytest.skip(f"{test_name}: needs the optional {', '.join(missing)}, not installed")
    monkeypatch.chdir(REPO_ROOT)  # examples name files relative to the repository root
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=report.append, clear_globs=True)
    assert result.failed == 0, "".join(report)
    assert result.attempted > 0 or all(ex.options.get(doctest.SKIP) for ex in test.examples)


def test_the_examples_are_found():
    """The finder sees the packages' examples (a finder that found none would make the test above vacuous)."""
    names = {p.values[1] for p in PARAMS if p.values[1]}
    assert len(names) >= 45, len(names)
    # a module docstring, a function's and a method's
    assert {"nodeperf.suggest", "simulator.calibration.energy_validation.error_stats", "hwmodels.units"} <= names
    assert not SKIPPED_MODULES or all("optional" in r for r in SKIPPED_MODULES.values())

"""Function length budget: at most 20 functions over 80 lines outside tests, none over 150 unless a table."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nodeperf", "simulator", "hwmodels", "workloads", "studies", "benchmarks")
LONG = 80
MAX_LONG = 20
LIMIT = 150
# functions over LIMIT lines that are tables (data laid out one entry a line), with the reason
TABLES: dict[str, str] = {}


def _lengths() -> dict[str, int]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    key = f"{path.relative_to(ROOT).as_posix()}:{node.name}"
                    out[key] = max(out.get(key, 0), node.end_lineno - node.lineno + 1)
    return out


def test_counter_sees_long_functions():
    src = "def f():\n" + "    x = 1\n" * 90
    node = ast.parse(src).body[0]
    assert node.end_lineno - node.lineno + 1 == 91


def test_no_function_over_150_lines_unless_a_table():
    over = {k: n for k, n in _lengths().items() if n > LIMIT and k not in TABLES}
    assert not over, f"functions over {LIMIT} lines (split them, or list a table in TABLES with the reason): {over}"


def test_at_most_20_functions_over_80_lines():
    long = sorted(((n, k) for k, n in _lengths().items() if n > LONG), reverse=True)
    assert len(long) <= MAX_LONG, f"{len(long)} functions over {LONG} lines; expected <= {MAX_LONG}: {long}"


def test_table_allow_list_is_current():
    lengths = _lengths()
    stale = [k for k in TABLES if lengths.get(k, 0) <= LIMIT]
    assert not stale, f"TABLES lists functions no longer over {LIMIT} lines (or gone): {stale}"

"""Every test module has its own basename: the test folders are not packages, so pytest imports each module by
its basename and a second module of the same name stops the whole collection ("import file mismatch")."""

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.parent.relative_to(TESTS)))
    assert {name: dirs for name, dirs in where.items() if len(dirs) > 1} == {}

"""hwmodels.tables.table_problems: the one wording of a TOML table's unknown, missing and mistyped keys."""

from __future__ import annotations

from hwmodels.tables import table_problems


def _all(table, **kw):
    return [(p, m()) for p, m in table_problems(table, **kw)]


def test_unknown_key_with_near_match_missing_and_wrong_type_in_file_order():
    got = _all({"rate": "30 Hz", "dedline": "5 ms", "priority": True, "name": 3},
               allowed=("name", "rate", "deadline", "priority"), path="tasks.camera", required=("deadline",),
               types={"name": str, "priority": int})
    assert got == [
        ("tasks.camera.dedline", "unknown key; got 'dedline'; expected one of name, rate, deadline, priority; "
                                 "did you mean 'deadline'?"),
        ("tasks.camera.priority", "wrong type; got True (bool); expected int"),
        ("tasks.camera.name", "wrong type; got 3 (int); expected str"),
        ("tasks.camera.deadline", "missing; got nothing; expected deadline = ..."),
    ]


def test_a_good_table_has_no_problems_and_messages_are_built_only_when_asked():
    assert _all({"name": "x", "n": 2}, allowed=("name", "n"), types={"n": (int, float)}) == []
    many = {f"bogus{i}": i for i in range(5000)}
    lazy = list(table_problems(many, allowed=("name",)))
    assert len(lazy) == 5000 and lazy[0][0] == "bogus0" and callable(lazy[0][1])
    assert lazy[0][1]() == "unknown key; got 'bogus0'; expected one of name"

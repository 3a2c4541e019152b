"""Checking a named table of a TOML file: unknown keys (with the nearest allowed one), missing required
keys and values of the wrong type, each as one located problem ``(dotted path, message)``.

Spec files, node files, scenarios and experiments all validate their tables the same way; this is the
one place that words it, so every file reads ``<path>: unknown key; got 'x'; expected one of a, b, c;
did you mean 'b'?``. Messages are built lazily (a callable), so a file with thousands of problems
costs only the ones shown.

Examples
--------
>>> [(p, m()) for p, m in table_problems({"nmae": "x"}, allowed=("name", "kind"), path="devices.gpu")]
[('devices.gpu.nmae', "unknown key; got 'nmae'; expected one of name, kind; did you mean 'name'?")]
>>> [(p, m()) for p, m in table_problems({}, allowed=("name",), required=("name",))]
[('name', 'missing; got nothing; expected name = ...')]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from nodeperf.suggest import did_you_mean, short_repr

__all__ = ["table_problems"]

#: How many characters of a bad key or value a message shows.
KEY_LIMIT = 80


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def table_problems(table: Mapping[str, Any], *, allowed: Sequence[str], path: str = "", what: str = "key",
                   required: Iterable[str] = (), types: Mapping[str, tuple[type, ...] | type] | None = None,
                   expected: str | None = None, near: Sequence[str] | None = None,
                   ) -> Iterator[tuple[str, Callable[[], str]]]:
    """The problems of ``table`` (the TOML table at dotted ``path``), in file order, then missing keys.

    ``allowed`` lists the keys in the order the message lists them; ``what`` names them ("key",
    "option"); ``types`` gives the type (or types) a present key's value must have (``bool`` is never
    taken for an ``int``); ``expected`` replaces "one of <allowed>" in the message (``"a field of
    DeviceSpec"``) and ``near`` the names a near match is looked for in (default: ``allowed``).
    """
    allowed = list(allowed)
    expect = expected or f"one of {', '.join(allowed)}"
    near = list(near) if near is not None else allowed
    for k in table:
        if k not in allowed:
            yield _join(path, str(k)), (lambda k=k: f"unknown {what}; got {short_repr(k, KEY_LIMIT)}; expected {expect}"
                                                     f"{did_you_mean(str(k), near)}")
        elif types and k in types:
            want = types[k] if isinstance(types[k], tuple) else (types[k],)
            v = table[k]
            if not isinstance(v, want) or (isinstance(v, bool) and bool not in want):
                names = " or ".join(t.__name__ for t in want)
                yield _join(path, str(k)), (lambda k=k, v=v, names=names: f"wrong type; got {short_repr(v, KEY_LIMIT)}"
                                                                           f" ({type(v).__name__}); expected {names}")
    for k in required:
        if k not in table:
            yield _join(path, k), (lambda k=k: f"missing; got nothing; expected {k} = ...")

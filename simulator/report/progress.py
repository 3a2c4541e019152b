"""One progress bar for every long job (sweeps, planning, validation, calibration, tuning, studies).

:func:`progress_bar` returns a ``tqdm.auto`` bar writing to standard error (a widget in a Jupyter
notebook), or a silent stand-in with the same methods when progress is off. Progress is on when
the caller asks for it (``enabled=True``, a command's ``--progress``), off when it asks not to
(``enabled=False``, ``--no-progress``), and otherwise on only where someone watches: standard error
is a terminal, or the code runs in a notebook kernel. The environment variable
``NODEPERF_PROGRESS`` (``0`` or ``1``) overrides the default for scripts and CI.

Library functions take ``progress: bool | None = None`` and pass it through; they never print
otherwise.

Examples
--------
>>> from simulator.report.progress import progress_bar
>>> with progress_bar(total=3, desc="demo", enabled=False) as bar:
...     for _ in range(3):
...         bar.update(1)
>>> bar.n
3
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["progress_bar", "progress_enabled", "track", "PROGRESS_ENV"]

#: Environment variable that turns the default on (``1``) or off (``0``).
PROGRESS_ENV = "NODEPERF_PROGRESS"

T = TypeVar("T")


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - any failure means: not a notebook
        return False
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def progress_enabled(enabled: bool | None = None) -> bool:
    """Whether a bar shows: ``enabled`` when given, else ``NODEPERF_PROGRESS``, else a terminal or a notebook."""
    if enabled is not None:
        return bool(enabled)
    env = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty or _in_notebook()


class _Silent:
    """A bar that counts but draws nothing (progress off)."""

    def __init__(self, total: float | None = None, desc: str = "", **_: Any) -> None:
        self.total = total
        self.n = 0
        self.desc = desc
        self.postfix = ""

    def update(self, n: float = 1) -> None:
        self.n += n

    def set_description(self, desc: str = "", refresh: bool = True) -> None:  # noqa: ARG002
        self.desc = desc

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:  # noqa: ARG002
        self.postfix = s

    def reset(self, total: float | None = None) -> None:
        self.n = 0
        self.total = total

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: float | None = None, *, desc: str = "", unit: str = "it",
                 enabled: bool | None = None, leave: bool = True) -> Any:
    """A progress bar (``tqdm.auto``, on standard error) or a silent stand-in when progress is off.

    Parameters
    ----------
    total
        Units of work (None when unknown: a counter with a rate).
    desc
        Label in front of the bar.
    unit
        Name of one unit (``"pt"``, ``"case"``, ``"trial"``).
    enabled
        True/False force it; None: see :func:`progress_enabled`.
    leave
        Keep the finished bar on screen.

    Returns
    -------
    An object with ``update(n)``, ``set_description``, ``set_postfix_str``, ``close`` and the
    context-manager protocol.
    """
    if not progress_enabled(enabled):
        return _Silent(total=total, desc=desc)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, smoothing=0.1,
                leave=leave, mininterval=0.2)


def track(items: Iterable[T], *, total: int | None = None, desc: str = "", unit: str = "it",
          enabled: bool | None = None) -> Iterator[T]:
    """Iterate ``items`` with a progress bar (``total`` defaults to ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    bar = progress_bar(total, desc=desc, unit=unit, enabled=enabled)
    try:
        for x in items:
            yield x
            bar.update(1)
    finally:
        bar.close()

"""Lazy re-exports for the package ``__init__`` modules: a public name is imported on first use.

A package declares ``_EXPORTS`` (public name -> the module it comes from) and ``__all__``, then
``__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)`` (PEP 562), so importing the
package loads none of its submodules until one of their names is asked for. This module imports
nothing from the project.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str],
                 public: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``.

    ``__getattr__`` resolves a name of ``exports`` from its module, or a public submodule of the
    package, caching it in the package's namespace; anything else is an :class:`AttributeError`.
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        elif name.isidentifier() and not name.startswith("_"):
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__

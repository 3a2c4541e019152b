"""The installed version of nodeperf, read from its ``*.dist-info/METADATA`` without importing
:mod:`importlib.metadata` (whose import alone takes tens of milliseconds, more than the rest of
``nodeperf --version``); :mod:`importlib.metadata` answers when no ``dist-info`` folder is found on
``sys.path`` (an ``.egg-info`` install, a zip)."""

from __future__ import annotations

import functools
import os
import sys

__all__ = ["package_version"]


def _metadata_version(path: str) -> str | None:
    """The ``Version:`` header of a METADATA file (headers end at the first blank line)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    return None
                if line.startswith("Version:"):
                    return line[len("Version:"):].strip() or None
    except OSError:
        return None
    return None


@functools.lru_cache(maxsize=8)
def package_version(name: str = "nodeperf") -> str | None:
    """The version of the installed distribution ``name`` (None: not installed), as
    ``importlib.metadata.version(name)`` gives it: the first ``name-*.dist-info`` along ``sys.path``.

    >>> from importlib import metadata
    >>> package_version() == metadata.version("nodeperf")
    True
    """
    prefix = name.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                found = sorted(d.path for d in it if d.name.lower().startswith(prefix)
                               and d.name.lower().endswith(".dist-info"))
        except OSError:  # not a folder (a zip, a path hook), or unreadable
            continue
        for path in found:
            version = _metadata_version(os.path.join(path, "METADATA"))
            if version:
                return version
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

"""The root exception and warning classes of nodeperf (as :mod:`networkx.exception` and SimPy have).

Every error nodeperf raises on purpose for bad input (a spec, a graph, a file, a flag) subclasses
:class:`NodeperfError` *and* the built-in exception it always subclassed (``SpecError(NodeperfError,
ValueError)``, ``UnsupportedOpError(NodeperfError, NotImplementedError)``), so ``except ValueError``
keeps working and ``except nodeperf.NodeperfError`` catches them all. Warnings nodeperf issues
through :mod:`warnings` are :class:`NodeperfWarning` (or a subclass), so they can be filtered as one.

This module imports nothing from the project: every layer (:mod:`workloads`, :mod:`hwmodels`,
:mod:`simulator`) may import it, and ``import nodeperf.errors`` loads none of them.

>>> from nodeperf.errors import NodeperfError
>>> from hwmodels.spec import SpecError
>>> issubclass(SpecError, NodeperfError) and issubclass(SpecError, ValueError)
True
"""

from __future__ import annotations

__all__ = ["NodeperfError", "NodeperfWarning"]


class NodeperfError(Exception):
    """Base of the located errors nodeperf raises for bad input (the CLI prints them as one line, exit 2)."""


class NodeperfWarning(UserWarning):
    """Base of the warnings nodeperf issues through :mod:`warnings`."""

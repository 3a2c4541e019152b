"""Importers that turn models from other frameworks (ONNX files, PyTorch modules) into OpGraphs.

Each importer imports its framework lazily, inside the function, so ``import workloads`` never needs
onnx or torch:

* :func:`workloads.importers.onnx_import.import_onnx` (needs the ``onnx`` extra);
* :func:`workloads.importers.torch_import.import_module` (needs the ``torch`` extra).
"""

from __future__ import annotations

from typing import Any

from workloads.importers.naming import unique_name

__all__ = ["import_onnx", "import_module", "unique_name"]


def import_onnx(*args: Any, **kwargs: Any) -> Any:
    """See :func:`workloads.importers.onnx_import.import_onnx`."""
    from workloads.importers.onnx_import import import_onnx as f

    return f(*args, **kwargs)


def import_module(*args: Any, **kwargs: Any) -> Any:
    """See :func:`workloads.importers.torch_import.import_module`."""
    from workloads.importers.torch_import import import_module as f

    return f(*args, **kwargs)

"""The shipped fabrics catalog with one line edited, loaded for its located error (tests of bad catalog input)."""

from __future__ import annotations

import pytest

from hwmodels.collectives import DEFAULT_FABRICS_FILE, load_fabric_catalog
from hwmodels.spec import SpecError


def fabrics_error_with(tmp_path, old: str, new: str, within: str = "", source=None) -> str:
    """The SpecError message of the catalog whose one line starting at ``old`` (found once, or once in the table
    whose header line is ``within``: entries such as ``[libraries."nccl-2.29"]`` repeat lines of ``[libraries.nccl]``)
    reads ``new``; ``source``: another catalog text to edit than the shipped one."""
    text = (source or DEFAULT_FABRICS_FILE).read_text()
    lo = text.index(within + "\n") if within else 0
    hi = text.find("\n[", lo + 1) if within else len(text)
    hi = len(text) if hi < 0 else hi
    assert text.count(old, lo, hi) == 1
    start = text.index(old, lo, hi)
    line_end = text.index("\n", start)
    path = tmp_path / "fabrics.toml"
    path.write_text(text[:start] + new + text[line_end:])
    with pytest.raises(SpecError) as e:
        load_fabric_catalog(path)
    return str(e.value)

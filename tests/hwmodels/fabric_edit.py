"""The shipped fabrics catalog with one line edited, loaded for its located error (tests of bad catalog input)."""

from __future__ import annotations

import pytest

from hwmodels.collectives import DEFAULT_FABRICS_FILE, load_fabric_catalog
from hwmodels.spec import SpecError


def fabrics_error_with(tmp_path, old: str, new: str) -> str:
    """The SpecError message of the catalog whose one line starting at ``old`` (found once) reads ``new``."""
    text = DEFAULT_FABRICS_FILE.read_text()
    assert text.count(old) == 1
    start = text.index(old)
    line_end = text.index("\n", start)
    path = tmp_path / "fabrics.toml"
    path.write_text(text[:start] + new + text[line_end:])
    with pytest.raises(SpecError) as e:
        load_fabric_catalog(path)
    return str(e.value)

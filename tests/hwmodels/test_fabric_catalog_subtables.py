"""A library's ``ll128`` or ``p2p`` entry that is not a table is one located problem of the fabrics file
(not a TypeError, nor one "unknown key" per letter of a string)."""

from __future__ import annotations

import pytest
from fabric_edit import fabrics_error_with

_LL128 = 'll128.max_gpu_nic_path = { value = "pxb", source = "@nccl_ll128_rule"'
_P2P = 'p2p.chunk_bytes = { value = "512 KiB", source = "@nccl_p2p: P2P_NVL_CHUNKSIZE default" }'


@pytest.mark.parametrize(("entry", "got"), [("true", "True"), ('"pxb"', "'pxb'")])
def test_ll128_that_is_not_a_table(tmp_path, entry: str, got: str) -> None:
    msg = fabrics_error_with(tmp_path, _LL128, f"ll128 = {entry}", within="[libraries.nccl]")
    assert msg == (f"{tmp_path / 'fabrics.toml'}:libraries.nccl.ll128: not a table; got {got}; expected "
                   'll128.max_gpu_nic_path = { value = "pxb", source = "..." }')


def test_p2p_that_is_not_a_table(tmp_path) -> None:
    # the table's other p2p.* lines go first (a string beside them would be a TOML error, not this one)
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text()
    lo = text.index("[libraries.nccl]\n")
    hi = text.index("\n[", lo + 1)
    kept = [ln for ln in text[lo:hi].split("\n") if not ln.startswith("p2p.") or ln.startswith(_P2P)]
    src = tmp_path / "src"
    src.mkdir()
    (src / "fabrics.toml").write_text(text[:lo] + "\n".join(kept) + text[hi:])
    msg = fabrics_error_with(tmp_path, _P2P, 'p2p = "512 KiB"', within="[libraries.nccl]", source=src / "fabrics.toml")
    assert msg == (f"{tmp_path / 'fabrics.toml'}:libraries.nccl.p2p: not a table; got '512 KiB'; expected "
                   'p2p.chunk_bytes = { value = "512 KiB", source = "..." }')

"""A library's ``ll128`` or ``p2p`` entry that is not a table is one located problem of the fabrics file
(not a TypeError, nor one "unknown key" per letter of a string)."""

from __future__ import annotations

import pytest
from fabric_edit import fabrics_error_with

_LL128 = 'll128.max_gpu_nic_path = { value = "pxb", source = "@nccl_ll128_rule"'
_P2P = 'p2p.chunk_bytes = { value = "512 KiB", source = "@nccl_p2p: P2P_NVL_CHUNKSIZE default" }'


@pytest.mark.parametrize(("entry", "got"), [("true", "True"), ('"pxb"', "'pxb'")])
def test_ll128_that_is_not_a_table(tmp_path, entry: str, got: str) -> None:
    msg = fabrics_error_with(tmp_path, _LL128, f"ll128 = {entry}")
    assert msg == (f"{tmp_path / 'fabrics.toml'}:libraries.nccl.ll128: not a table; got {got}; expected "
                   'll128.max_gpu_nic_path = { value = "pxb", source = "..." }')


def test_p2p_that_is_not_a_table(tmp_path) -> None:
    msg = fabrics_error_with(tmp_path, _P2P, 'p2p = "512 KiB"')
    assert msg == (f"{tmp_path / 'fabrics.toml'}:libraries.nccl.p2p: not a table; got '512 KiB'; expected "
                   'p2p.chunk_bytes = { value = "512 KiB", source = "..." }')

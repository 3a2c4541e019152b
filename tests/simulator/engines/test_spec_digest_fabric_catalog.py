"""A system's spec digest covers the fabric-catalog entries costing its collectives (a system spec names its
node configuration only), so a changed ``fabrics.toml`` entry is a new sweep point; a device's digest is the
hash of its own fields, as before."""

from __future__ import annotations

import hashlib
import json

import hwmodels.collectives as hc
import simulator.engines.analytical as an
import simulator.lowering.collectives as lc
from simulator.hardware import load_hardware


def _edit_catalog(tmp_path, monkeypatch) -> None:
    """Cost collectives from the shipped fabrics.toml with dgx-h100's ``gpu_nic_path`` changed from pix to pxb."""
    text = hc.DEFAULT_FABRICS_FILE.read_text()
    old = 'gpu_nic_path = { value = "pix", source = "@dgxh100_nic"'
    assert text.count(old) == 1
    path = tmp_path / "fabrics.toml"
    path.write_text(text.replace(old, 'gpu_nic_path = { value = "pxb", source = "@dgxh100_nic"'))
    monkeypatch.setattr(hc, "DEFAULT_FABRICS_FILE", path)
    lc._catalog_system.cache_clear()


def test_device_digest_is_the_hash_of_its_own_fields() -> None:
    spec = load_hardware("h100-sxm5-80gb")
    text = json.dumps(an.spec_tree(spec), sort_keys=True, separators=(",", ":"))
    assert an.spec_digest(spec) == hashlib.sha256(text.encode()).hexdigest()
    assert "fabric_catalog" not in an.digest_tree(spec)


def test_system_digest_holds_its_catalog_entry_and_changes_with_it(tmp_path, monkeypatch) -> None:
    lc._catalog_system.cache_clear()
    system = load_hardware("dgx-h100x2")
    shipped = an.spec_digest(system)
    tree = an.digest_tree(system)["fabric_catalog"]
    assert (tree["name"], tree["gpu_nic_path"], tree["library"]["ll128_max_gpu_nic_path"]) == ("dgx-h100", "pix", "pxb")
    try:
        _edit_catalog(tmp_path, monkeypatch)
        assert an.digest_tree(system)["fabric_catalog"]["gpu_nic_path"] == "pxb"
        assert an.spec_digest(system) != shipped
    finally:
        monkeypatch.undo()
        lc._catalog_system.cache_clear()
    assert an.spec_digest(system) == shipped
    # the device inside is keyed as before
    assert an.spec_digest(system.device) == an.spec_digest(load_hardware("h100-sxm5-80gb"))

"""A spec field added later is left out of the spec digest at its "no data" value, so the digests of
devices without the data (and the sweep-store points keyed on them) did not change when it was added."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import simulator.engines.analytical as an
from simulator.hardware import load_hardware

_NEW = ("flash2_causal_fwd_ratio", "flash2_causal_fwd_ratio_scale")


def _tree_of_every_field(obj):
    """The spec tree with every field in it (provenance and file names out, an absent dvfs out, and
    sm.warp_schedulers at its default of 4, an empty energy.chain_j_per_flop and a zero
    efficiency.gemv_bandwidth_fraction, an efficiency.gemv_max_rows of 64, an efficiency.conv_rate_fraction of 1, an
    efficiency.dropout_stream_fraction or efficiency.mxfp8_quantize_stream_fraction of 0 and an
    efficiency.l2_tile_sm_port_ratio of 1, all added after the flash2 causal fields: the digest as it was before the
    flash2 causal fields were added)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _tree_of_every_field(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.name not in ("provenance", "source_file")
                and not (f.name == "dvfs" and getattr(obj, f.name) is None)
                and not (f.name == "warp_schedulers" and getattr(obj, f.name) == 4)
                and not (f.name == "chain_j_per_flop" and not getattr(obj, f.name))
                and not (f.name == "gemv_bandwidth_fraction" and getattr(obj, f.name) == 0.0)
                and not (f.name == "gemv_max_rows" and getattr(obj, f.name) == 64)
                and not (f.name == "conv_rate_fraction" and getattr(obj, f.name) == 1.0)
                and not (f.name == "dropout_stream_fraction" and getattr(obj, f.name) == 0.0)
                and not (f.name == "mxfp8_quantize_stream_fraction" and getattr(obj, f.name) == 0.0)
                and not (f.name == "l2_tile_sm_port_ratio" and getattr(obj, f.name) == 1.0)}
    if isinstance(obj, dict):
        return {str(k): _tree_of_every_field(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple)):
        return [_tree_of_every_field(x) for x in obj]
    return obj


def _digest_without_new_fields(spec) -> str:
    tree = _tree_of_every_field(spec)
    eff = tree["efficiency"]
    assert eff["flash2_causal_fwd_ratio"] == [] and eff["flash2_causal_fwd_ratio_scale"] == 1.0
    for name in _NEW:
        del eff[name]
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def test_non_hopper_digest_is_the_one_without_the_causal_ratio_fields() -> None:
    for name in ("a100-sxm4-80gb", "l4"):
        spec = load_hardware(name)
        assert an.spec_digest(spec) == _digest_without_new_fields(spec), name


def test_hopper_table_is_hashed_and_a_scale_other_than_one_too() -> None:
    h100 = load_hardware("h100-sxm5-80gb")
    eff = h100.efficiency
    assert eff.flash2_causal_fwd_ratio and eff.flash2_causal_fwd_ratio_scale == 1.0
    tree = an.spec_tree(h100)["efficiency"]
    assert "flash2_causal_fwd_ratio" in tree and "flash2_causal_fwd_ratio_scale" not in tree
    scaled = dataclasses.replace(h100, efficiency=dataclasses.replace(eff, flash2_causal_fwd_ratio_scale=1.05))
    assert an.spec_tree(scaled)["efficiency"]["flash2_causal_fwd_ratio_scale"] == 1.05
    assert an.spec_digest(scaled) != an.spec_digest(h100)
    no_table = dataclasses.replace(h100, efficiency=dataclasses.replace(eff, flash2_causal_fwd_ratio=()))
    assert "flash2_causal_fwd_ratio" not in an.spec_tree(no_table)["efficiency"]

"""``memory.<level>.usable_bytes``: the total a device's runtime reports (torch ``total_memory``, rocminfo), sourced
per GPU; ``MemoryLevel.usable`` falls back to the marketed ``capacity_bytes``; a capacity override keeps the
runtime's share."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.catalog import list_devices, load_device
from hwmodels.paths import with_overrides

GIB = 2**30


@pytest.mark.parametrize(("name", "gib"), [("h100-sxm5-80gb", 79.18), ("a100-sxm4-80gb", 79.25),
                                           ("h200-sxm-141gb", 139.80), ("b200", 178.35), ("l40s", 44.39),
                                           ("a100-sxm4-40gb", 40536 / 1024), ("mi300x", 201310208 / 2**20)])
def test_runtime_totals(name, gib):
    m = load_device(name).main_memory
    assert m.usable == pytest.approx(gib * GIB, abs=1.0)
    assert m.usable > m.capacity_bytes or name in ("mi300x", "l40s")  # decimal GB marketed, binary HBM stacks


def test_every_datacentre_gpu_states_a_sourced_figure():
    for name in list_devices():
        d = load_device(name)
        m = d.main_memory
        if d.kind != "gpu" or m.name not in ("hbm", "gddr", "gddr6") or "jetson" in name or "orin" in name:
            continue
        assert m.usable_bytes > 0, name
        assert len(d.source_of(f"memory.{m.name}.usable_bytes").source) > 20, name


def test_fallback_is_the_capacity():
    m = load_device("tpu-v5e").main_memory  # XLA's reserve is memory.hbm.reserved_bytes, not subtracted twice
    assert m.usable_bytes == 0 and m.usable == m.capacity_bytes == 16 * GIB


def test_capacity_override_keeps_the_share():
    h = load_device("h100-sxm5-80gb")
    big = with_overrides(h, {"memory.hbm.capacity_bytes": "160 GB"})
    assert big.main_memory.usable == pytest.approx(2 * 79.18 * GIB)
    both = with_overrides(h, {"memory.hbm.usable_bytes": "100 GiB", "memory.hbm.capacity_bytes": "160 GB"})
    assert both.main_memory.usable == 100 * GIB  # an explicit usable figure wins, whatever the order


def test_usable_of_arrays():
    import dataclasses

    m = dataclasses.replace(load_device("h100-sxm5-80gb").main_memory, usable_bytes=np.array([0.0, 5.0]),
                            capacity_bytes=np.array([7.0, 9.0]))
    assert m.usable.tolist() == [7.0, 5.0]

"""A software stack on a node of several devices: only the devices it runs on take ops (eager PyTorch places
nothing on a TPU or a Jetson DLA; the note says why), and the CLI refuses a stack no device of the node runs."""

from __future__ import annotations

from hwmodels.node import load_node
from simulator.realtime.partition import partition
from workloads.frameworks import PROFILES
from workloads.resolve import load_workload


def test_an_eager_stack_places_nothing_on_the_dlas() -> None:
    node = load_node("jetson-agx-orin-64gb")
    r = partition(load_workload("resnet50"), node, "latency", profile=PROFILES["eager"])
    assert set(r.placement.values()) <= {"gpu", "cpu"}
    assert any("dla0:" in n and "the eager stack does not run on orin-dla" in n for n in r.notes)
    free = partition(load_workload("resnet50"), node, "latency")  # no stack stated: the DLAs may take ops
    assert not any("stack does not run" in n for n in free.notes)

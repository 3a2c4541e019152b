"""Spec digests move only when a value moves: a device field added with a "no data" value
(``efficiency.library_gemm_call_s`` of 0 on CDNA and TPU devices) and fabric-catalog fields added at their
declared defaults are left out, so the digests of specs whose values did not change (and the sweep-store
points keyed on them) are those computed before the fields existed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

import simulator.engines.analytical as an
from hwmodels.collectives import fabric_catalog
from hwmodels.paths import with_overrides
from simulator import EvalOptions, evaluate
from simulator.hardware import load_hardware
from simulator.sweep import load_results, run_sweep
from workloads.resolve import load_workload

# spec_digest of each name computed at commit b7976b7, before efficiency.library_gemm_call_s and the fabric
# catalog's family, versions, ring_* caps, eager_max_bytes, rendezvous_latency_s, rccl_tuner and
# nvls_tree_chunk_bytes were added; none of their values has changed since
_DIGESTS_AT_B7976B7 = {
    # (mi300x re-recorded when its efficiency.graph_launch_overhead_s moved, 2.5 us -> the MI210's HIP-graph chain)
    "mi300x": "a7c623e36baeea38848f32ed91a919a6292ee6403d985b8e268f65534b87f724",
    "tpu-v6e": "909dbc958b17cbdd38152545e1ca7ce2b53384ef62ef204ae13855433a80fa18",
    # a TPU slice: its collectives are costed by the tpu-v6e-pod catalog entry (ICI torus); then one over DCN
    "tpu-v6e-8": "757d0c83732ae8379979bc150d0d59983c900179c9d4e2a08a287c966f5bca6d",
    "tpu-v5e-256x4": "512f03c1b60ea2c0b8b19d522f3232c211a682e913b764297db55abba6865d58",
}


@pytest.mark.parametrize("name", sorted(_DIGESTS_AT_B7976B7))
def test_digest_is_the_one_before_the_fields_were_added(name: str) -> None:
    assert an.spec_digest(load_hardware(name)) == _DIGESTS_AT_B7976B7[name]


def test_library_gemm_call_is_hashed_only_where_it_has_a_figure() -> None:
    mi300x, h100 = load_hardware("mi300x"), load_hardware("h100-sxm5-80gb")
    assert mi300x.efficiency.library_gemm_call_s == 0.0
    assert "library_gemm_call_s" not in an.spec_tree(mi300x)["efficiency"]
    assert an.spec_tree(h100)["efficiency"]["library_gemm_call_s"] == pytest.approx(10e-6)  # efficiency.toml
    given = with_overrides(mi300x, {"efficiency.library_gemm_call_s": 5e-6})
    assert an.spec_tree(given)["efficiency"]["library_gemm_call_s"] == 5e-6
    assert an.spec_digest(given) != an.spec_digest(mi300x)


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    count: int = 0
    rate: float | None = None
    table: tuple[int, ...] = dataclasses.field(default_factory=tuple)
    flag: bool = False


def test_catalog_fields_at_their_declared_default_are_left_out() -> None:
    assert an._plain_tree(_Entry("x")) == {"name": "x"}
    assert an._plain_tree(_Entry("x", count=2, rate=0.0, table=(1,), flag=True)) == {
        "name": "x", "count": 2, "rate": 0.0, "table": [1], "flag": True}
    assert an._plain_tree(_Entry("x", count=False)) == {"name": "x", "count": False}  # a bool is not the int 0


def test_catalog_fields_keyed_before_stay_at_their_default_and_new_ones_appear_when_set() -> None:
    pod = fabric_catalog().system("tpu-v6e-pod")
    tree = an._plain_tree(pod)
    assert pod.intra.ll128 is False and tree["intra"]["ll128"] is False  # a field the first digests held
    assert pod.intra.rendezvous_latency_s == 0.0 and "rendezvous_latency_s" not in tree["intra"]
    assert pod.library.family is None and "family" not in tree["library"]
    named = dataclasses.replace(pod, intra=dataclasses.replace(pod.intra, rendezvous_latency_s=20e-6))
    assert an._plain_tree(named)["intra"]["rendezvous_latency_s"] == 20e-6


def test_rccl_tuner_table_of_an_amd_node_is_hashed() -> None:
    node = fabric_catalog().system("mi300x-8")
    assert node.intra.rccl_tuner is not None
    assert an._plain_tree(node)["intra"]["rccl_tuner"] == an._plain_tree(node.intra.rccl_tuner)


_SWEEP = """
schema = "nodeperf.experiment/1"
name = "digest"
metrics = ["latency_s"]
[workload]
model = "gpt2"
phase = "decode"
context = 128
[hardware]
name = "{device}"
[axes.hardware]
"efficiency.{field}" = [{values}]
"""


def _canon_hash(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


@pytest.mark.parametrize(("device", "field", "values", "numbers"), [
    ("mi300x", "library_gemm_call_s", '"5 us", "10 us"', [5e-6, 10e-6]),  # left out of the base (0 there)
    ("h100-sxm5-80gb", "flash2_causal_fwd_ratio_scale", "1.0, 1.05", [1.0, 1.05]),  # 1 is left out, 1.05 not
])
def test_sweep_point_digest_of_a_field_the_base_leaves_out(tmp_path: Path, device: str, field: str, values: str,
                                                           numbers: list[float]) -> None:
    """A sweep writing a field into the base's digest tree puts it in where the base leaves it out, and takes
    it out at its "absent" value: each point's provenance is that of an evaluation of the spec it stands for."""
    exp = tmp_path / "e.toml"
    exp.write_text(_SWEEP.format(device=device, field=field, values=values), encoding="utf-8")
    out = tmp_path / "r.sqlite"
    s = run_sweep(exp, out, scheduler="synchronous")
    assert (s.total, s.errors) == (2, 0)
    base, graph = load_hardware(device), load_workload("gpt2", phase="decode", batch=1, context=128)
    seen = {}
    for row in load_results(out).to_dict("records"):
        value = row[f"hardware.efficiency.{field}"]
        rep = evaluate(graph, with_overrides(base, {f"efficiency.{field}": value}), EvalOptions())
        assert row["provenance_sha256"] == _canon_hash(rep.provenance), value
        seen[value] = rep.provenance["spec_sha256"]
    assert sorted(seen) == pytest.approx(numbers) and len(set(seen.values())) == 2

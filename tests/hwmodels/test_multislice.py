"""TPU Multislice: slices joined by the data-centre network, collectives priced hierarchically
(ICI reduce-scatter in the slice, DCN all-reduce of the shard across slices, ICI all-gather)."""

from __future__ import annotations

import dataclasses

import pytest

from hwmodels.collectives import (
    dcn_bandwidth_per_chip,
    load_collective_system,
    multislice_collective,
    select_algorithm,
    slice_system,
    torus_group_system,
)

GIB = 2**30
DCN_STEP_S = 14e-6  # fabrics.toml libraries.xla-tpu step_latency_s.net.simple


@pytest.mark.parametrize("pod, per_chip", [
    ("tpu-v5e-pod", 25e9 / 8),  # 2 x 100 Gbps per 8-chip host
    ("tpu-v5p-pod", 50e9 / 8),  # 50 Gbps per chip
    ("tpu-v6e-pod", 100e9 / 8 * 0.329),  # 4 x 200 Gbps per 8-chip host at the measured 0.329 (psum over DCN)
    ("tpu-v4-pod", 2.5e10 / 4),  # scaling book: 2.5e10 B/s per 4-chip host
])
def test_dcn_bandwidth_per_chip_is_the_documented_figure(pod, per_chip) -> None:
    csys = load_collective_system(pod)
    assert dcn_bandwidth_per_chip(csys) == pytest.approx(per_chip, rel=1e-12)
    assert dcn_bandwidth_per_chip(slice_system(csys, 64)) == pytest.approx(per_chip, rel=1e-12)


def test_all_reduce_over_four_v5e_slices_is_ici_reduce_scatter_dcn_all_reduce_ici_all_gather() -> None:
    s = slice_system(load_collective_system("tpu-v5e-pod"), 256)
    r = multislice_collective("all_reduce", GIB, 1024, s, 4)
    rs = select_algorithm("reduce_scatter", GIB, 256, s).time_s
    ag = select_algorithm("all_gather", GIB, 256, s).time_s
    # hand-computed DCN part: ring all-reduce of the 1 GiB / 256 shard across 4 slices at 3.125 GB/s per chip
    dcn = 2 * 3 / 4 * (GIB / 256) / 3.125e9 + 2 * 3 * DCN_STEP_S
    assert dcn == pytest.approx(2.0132659e-3 + 84e-6, rel=1e-6)
    assert r.time_s == pytest.approx(rs + dcn + ag, rel=1e-12)
    assert (r.algorithm, r.n_nodes, r.n_devices) == ("hierarchical", 4, 1024)


def test_reduce_scatter_all_gather_and_sends_across_slices() -> None:
    s = slice_system(load_collective_system("tpu-v5p-pod"), 64)
    bw = 50e9 / 8
    rs = multislice_collective("reduce_scatter", GIB, 128, s, 2).time_s
    assert rs == pytest.approx(select_algorithm("reduce_scatter", GIB, 64, s).time_s + 0.5 * GIB / 64 / bw
                               + DCN_STEP_S, rel=1e-12)
    ag = multislice_collective("all_gather", GIB, 128, s, 2).time_s
    assert ag == pytest.approx(select_algorithm("all_gather", GIB, 64, s).time_s + 0.5 * GIB / 64 / bw
                               + DCN_STEP_S, rel=1e-12)
    assert multislice_collective("send_recv", 2**20, 2, s, 2).time_s == pytest.approx(2**20 / bw + DCN_STEP_S)


def test_bad_layouts_are_refused() -> None:
    s = slice_system(load_collective_system("tpu-v5e-pod"), 16)
    with pytest.raises(ValueError, match="32 chips per slice; got n_devices=64, n_slices=2; expected at most 16"):
        multislice_collective("all_reduce", GIB, 64, s, 2)
    with pytest.raises(ValueError, match="expected 2 or more slices dividing 30"):
        multislice_collective("all_reduce", GIB, 30, s, 4)
    with pytest.raises(ValueError, match="no data-centre network"):
        dcn_bandwidth_per_chip(dataclasses.replace(s, inter=None))


def test_data_parallel_plan_over_slices_pays_dcn_once_per_step() -> None:
    from simulator.hardware import load_hardware
    from simulator.parallel import evaluate_plan
    from workloads.ir import Role
    from workloads.parallel import ParallelPlan, plan_graphs

    plan = ParallelPlan(dp=32, microbatch=1, global_batch=32)
    two = evaluate_plan("gpt2", load_hardware("tpu-v5e-16x2"), plan, train=True, seq=512)
    one = evaluate_plan("gpt2", load_hardware("tpu-v5e-16"), ParallelPlan(dp=16, microbatch=1, global_batch=16),
                        train=True, seq=512)
    grad = sum(float(sg.graph.role_bytes(Role.GRADIENT)) for sg in plan_graphs("gpt2", plan, train=True, seq=512))
    # a v5e-16 slice is a 4x4 torus without wraparounds (only an axis of 16 has one): the in-slice legs
    # run over one link per axis (hwmodels.collectives.torus_group_system), not all four ports
    s = torus_group_system(slice_system(load_collective_system("tpu-v5e-pod"), 16), (4, 4), 32, 1, (False, False))
    assert (s.intra.links_per_device, s.intra.torus_dims) == (2, 2)
    want = multislice_collective("all_reduce", grad, 32, s, 2).time_s
    assert two.breakdown["dp_sync_s"] == pytest.approx(want, rel=1e-9)
    # the DCN leg (2 slices, one chip's 3.125 GB/s share) is what the second slice adds
    dcn = (grad / 16) / 3.125e9 + 2 * DCN_STEP_S
    assert two.breakdown["dp_sync_s"] - dcn == pytest.approx(
        select_algorithm("reduce_scatter", grad, 16, s).time_s + select_algorithm("all_gather", grad, 16, s).time_s,
        rel=1e-9)
    assert two.breakdown["dp_sync_s"] > one.breakdown["dp_sync_s"]


def test_more_chips_than_the_slices_hold_is_one_located_line(capsys) -> None:
    from simulator.cli.main import main

    rc = main(["predict", "gpt2", "--hardware", "tpu-v5e-16x2", "--dp", "64", "--train", "--seq", "128",
               "--microbatch", "1", "--global-batch", "64"])
    err = capsys.readouterr().err
    assert rc == 2 and "got hardware 'tpu-v5e-16x2' with 32" in err and len(err.strip().splitlines()) == 1


def test_slices_on_a_pod_without_a_dcn_are_refused(monkeypatch) -> None:
    import hwmodels.collectives as hc
    from hwmodels.catalog import load_system
    from hwmodels.spec import SpecError

    cat = hc.fabric_catalog()
    systems = dict(cat.systems)
    systems["tpu-v5e-pod"] = dataclasses.replace(systems["tpu-v5e-pod"], inter=None, nics_per_node=0)
    monkeypatch.setattr(hc, "fabric_catalog", lambda: dataclasses.replace(cat, systems=systems))
    with pytest.raises(SpecError, match="x4 slices; got a tpu-v5e node configuration without a data-centre network"):
        load_system("tpu-v5e-256x4")
    assert load_system("tpu-v5e-256").count == 256


@pytest.mark.parametrize("name, needle", [
    ("tpu-v5ex4", "x4 on a single device; got device 'tpu-v5e' with no network between copies of it; expected a "
                  "node with NICs (dgx-h100x4) or a TPU slice name; for TPU slices over the data-centre network: "
                  "tpu-v5e-256x4"),
    ("edge-tpux2", "x2 on a single device; got device 'edge-tpu'"),
])
def test_xn_on_a_device_without_a_network_is_one_located_line(name, needle, capsys) -> None:
    from simulator.cli.main import main

    rc = main(["predict", "gpt2", "--hardware", name, "--dp", "2", "--phase", "decode"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_v6e_dcn_all_reduce_reproduces_the_published_psum_over_two_slices() -> None:
    """tpu-recipes microbenchmarks/trillium/collectives/README.md @ c8cfe2f6: psum over the 'dcn' axis of a
    17408 x 17408 bf16 matrix split over 2 x v6e-256 slices, 4.113 GB/s achieved (bytes x 2 (s-1) / s / s / time),
    i.e. 73.7 ms for each chip's 0.303 GB; the model: a ring between the chip and its counterpart, 0.303 GB at the
    0.329 x 12.5 GB/s DCN share plus 2 net steps."""
    csys = slice_system(load_collective_system("tpu-v6e-pod"), 256)
    matrix = 17408 * 17408 * 2
    r = multislice_collective("all_reduce", matrix / 2, 2, csys, 2)
    measured_s = matrix * 2 * 1 / 2 / 2 / 4.1130934137328214e9
    assert float(r.time_s) == pytest.approx(measured_s + 2 * DCN_STEP_S, rel=2e-3)

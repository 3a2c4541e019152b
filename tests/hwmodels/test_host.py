"""Host CPU detection and probes: clamping, the guest L3 cap, the probe cache, missing /sys and /proc.

Nothing here times the real machine: detection reads fake /sys and /proc trees, and the probe
functions are replaced by functions of the working-set size. The Intel Xeon KVM guest of issue 11
(2 vCPUs, a 480 MiB L3 reported) is simulated the same way; no such machine was available.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from hwmodels import host
from hwmodels.host import (
    GUEST_L3_BYTES_PER_CPU,
    HostInfo,
    clamp_levels,
    detect_host,
    probe_cache_dir,
    probe_host,
    probe_plan,
    read_host_info,
)
from hwmodels.spec import DeviceSpec

KIB, MIB, GIB = 2**10, 2**20, 2**30


def fake_info(**over: object) -> HostInfo:
    """A 2-core Intel Xeon KVM guest that reports the host's 480 MiB L3 (issue 11)."""
    base = dict(
        model_name="Intel(R) Xeon(R) 6980P", vendor_id="GenuineIntel", family=6, cores=2, logical_cpus=2,
        clock_hz=2.0e9, clock_source="test", simd_bits=512, flags=frozenset({"avx512f", "fma", "hypervisor"}),
        caches={"l1d": (48 * KIB, 96 * KIB), "l2": (2 * MIB, 4 * MIB), "l3": (480 * MIB, 480 * MIB)},
        cache_source="test lscpu", memory_bytes=16 * GIB, hostname="guest",
        cache_sharing={"l1d": 1, "l2": 1, "l3": 2}, online_cpus=2, hypervisor="KVM", hypervisor_source="test",
    )
    base.update(over)
    return HostInfo(**base)  # type: ignore[arg-type]


#: What the guest's caches really hold: the L2, then the L3 share a busy host leaves it; beyond, DRAM.
TRUE_L2, TRUE_L3 = 2 * MIB, 8 * MIB
BW = {"l2": 80e9, "l3": 40e9, "dram": 12e9}


def physical_copy_bw(array_bytes: int, repeats: int) -> float:
    """Copy bandwidth of the simulated guest for two arrays of ``array_bytes``: by working set.

    Beyond the L3 share the copy is DRAM-bound, and the long "L3" probe of the old rule (two 120 MiB
    arrays) is disturbed by the other tenants: it reads below the DRAM probe, as on the real machine.
    """
    ws = 2 * array_bytes
    if ws <= TRUE_L2:
        return BW["l2"]
    if ws <= TRUE_L3:
        return BW["l3"]
    return BW["dram"] if ws >= 256 * MIB * 2 else 0.8 * BW["dram"]


def physical_latency(nbytes: int, steps: int, seed: int = 0) -> float:
    return 5e-9 if nbytes <= TRUE_L2 else 30e-9 if nbytes <= TRUE_L3 else 120e-9


def install_fake_probes(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> dict[str, int]:
    """Probe functions of the simulated guest, a private cache folder; returns a count of probe runs."""
    calls = {"runs": 0}
    monkeypatch.setattr(host, "_copy_bandwidth", physical_copy_bw)
    monkeypatch.setattr(host, "_chase_latency", physical_latency)
    monkeypatch.setattr(host, "_special_function_probe", lambda: {"sf_exp": 1e-9, "sf_tanh": 2e-9})
    monkeypatch.setattr(host, "_strided_copy_probe", lambda: 5e-9)
    real = host._run_probes.__wrapped__

    def counting(plan: host.ProbePlan) -> dict[str, float]:
        calls["runs"] += 1
        out = real(plan)
        out["call_overhead"] = 1e-6  # the real per-call timing of np.add would make values machine-dependent
        return out

    monkeypatch.setattr(host, "_run_probes", counting)
    monkeypatch.setattr(host, "_load_average", lambda: 0.5)  # a quiet machine unless a test says otherwise
    monkeypatch.setattr(host, "_WRITTEN_HERE", {})
    monkeypatch.setenv("NODEPERF_CACHE_DIR", str(cache_dir))
    monkeypatch.delenv("NODEPERF_NO_CACHE", raising=False)
    return calls


def intel_guest_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cores: int | None = 1) -> DeviceSpec:
    """The host spec of the simulated Intel Xeon KVM guest of issue 11 (fake detection and probes)."""
    install_fake_probes(monkeypatch, tmp_path / "cache")
    return detect_host(fake_info(), cores=cores)


def new_process() -> None:
    """Forget which cache files this process wrote (as a later run would)."""
    host._WRITTEN_HERE.clear()


@pytest.fixture
def fake_probes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, int]:
    return install_fake_probes(monkeypatch, tmp_path / "cache")


# ------------------------------------------------------------------------------------------------
# the clamping rule


def test_a_cache_level_slower_than_dram_is_clamped_and_flagged() -> None:
    levels, notes = clamp_levels([("dram", 20e9, 100e-9), ("l3", 15e9, 150e-9), ("l2", 80e9, 5e-9)])
    assert levels == [("dram", 20e9, 100e-9), ("l3", 20e9, 100e-9), ("l2", 80e9, 5e-9)]
    assert notes == {"memory.l3.read_bandwidth_bytes_per_s": "clamped: probe gave 15 GB/s < dram 20 GB/s",
                     "memory.l3.latency_s": "clamped: probe gave 150 ns > dram 100 ns"}


def test_clamping_walks_inwards_against_the_already_clamped_level() -> None:
    levels, notes = clamp_levels([("dram", 20e9, 1e-7), ("l3", 10e9, 5e-8), ("l2", 18e9, 1e-8)])
    assert [bw for _, bw, _ in levels] == [20e9, 20e9, 20e9]  # l2 (18) < l3 as clamped (20)
    assert set(notes) == {"memory.l3.read_bandwidth_bytes_per_s", "memory.l2.read_bandwidth_bytes_per_s"}
    assert "< l3 20 GB/s" in notes["memory.l2.read_bandwidth_bytes_per_s"]
    consistent = [("dram", 1e9, 1e-7), ("l2", 2e9, 1e-8)]
    assert clamp_levels(consistent) == (consistent, {})


def test_the_spec_carries_the_clamp_in_its_source_and_warns(fake_probes: dict[str, int],
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    real = host._copy_bandwidth
    # a noisy L3 probe that reads below DRAM even at the capped size
    ladder = probe_plan(fake_info()).l3_ladder
    monkeypatch.setattr(host, "_copy_bandwidth", lambda b, r: 9e9 if 2 * b in ladder else real(b, r))
    with caplog.at_level(logging.WARNING, logger="hwmodels.host"):
        dev = detect_host(fake_info())
    l3 = dev.level("l3")
    assert l3.read_bandwidth_bytes_per_s == dev.level("dram").read_bandwidth_bytes_per_s == BW["dram"]
    src = dev.source_of("memory.l3.read_bandwidth_bytes_per_s").source
    assert src.startswith("measured: host probe") and src.endswith("clamped: probe gave 9 GB/s < dram 12 GB/s")
    assert "clamped" not in dev.source_of("memory.dram.read_bandwidth_bytes_per_s").source
    assert any("memory.l3.read_bandwidth_bytes_per_s: clamped" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------------
# probe sizes and the guest L3 cap


def test_a_guest_reporting_a_480_mib_l3_on_2_cpus_is_capped_to_its_share() -> None:
    plan = probe_plan(fake_info())
    assert plan.l3_top_bytes == 2 * GUEST_L3_BYTES_PER_CPU == 32 * MIB
    assert plan.l3_ladder == (4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB)  # doubling from 2 x L2
    assert "hypervisor guest (KVM)" in plan.l3_rule and "480 MiB" in plan.l3_rule
    assert plan.l2_bytes == 1 * MIB  # half of one L2
    assert plan.dram_bytes == 2 * 256 * MIB  # capped at two 256 MiB arrays


def test_bare_metal_keeps_the_reported_l3_up_to_the_largest_probe() -> None:
    plan = probe_plan(fake_info(hypervisor="", flags=frozenset({"avx512f", "fma"})))
    assert plan.l3_top_bytes == 256 * MIB and "at most 256 MiB" in plan.l3_rule
    assert plan.l3_ladder == tuple(2**k * MIB for k in range(2, 9))
    # a guest whose reported L3 is within its share keeps it
    small = probe_plan(fake_info(caches={"l2": (1 * MIB, 2 * MIB), "l3": (4 * MIB, 4 * MIB)}))
    assert small.l3_top_bytes == 4 * MIB and small.l3_ladder == (2 * MIB, 4 * MIB)
    assert "within 2 guest CPU(s)" in small.l3_rule
    # an L3 no larger than twice the L2 still gets one step; no L3, no ladder
    assert probe_plan(fake_info(caches={"l2": (2 * MIB, 2 * MIB), "l3": (2 * MIB, 2 * MIB)})).l3_ladder == (1 * MIB,)
    assert probe_plan(fake_info(caches={"l2": (2 * MIB, 2 * MIB)})).l3_ladder == ()


def _ladder_values(bws: list[float], dram: float = 10e9) -> dict[str, float]:
    return {"dram_bw": dram, **{f"l3_ladder_{i}": bw for i, bw in enumerate(bws)}}


def test_the_usable_l3_is_where_the_ladder_falls_below_the_geometric_mean() -> None:
    plan = probe_plan(fake_info())  # ladder 4, 8, 16, 32 MiB; top 32 MiB
    # threshold sqrt(90 x 10) = 30 GB/s: 16 MiB is the last step at or above it
    knee = host.l3_from_ladder(plan, _ladder_values([90e9, 60e9, 31e9, 12e9]))
    assert knee is not None and knee.usable_bytes == 16 * MIB and knee.threshold_bytes_per_s == pytest.approx(30e9)
    assert (knee.probe_bytes, knee.bandwidth_bytes_per_s) == (4 * MIB, 90e9)  # fastest within 8 MiB
    assert "beyond a 16 MiB working set (12 GB/s at 32 MiB)" in knee.rule
    # a dip in the middle ends the L3 there (the walk stops at the first step below)
    assert host.l3_from_ladder(plan, _ladder_values([90e9, 20e9, 80e9, 80e9])).usable_bytes == 4 * MIB
    # no knee inside the ladder: the whole top
    flat = host.l3_from_ladder(plan, _ladder_values([50e9, 52e9, 55e9, 51e9]))
    assert flat.usable_bytes == 32 * MIB and flat.probe_bytes == 16 * MIB and "top of the ladder" in flat.rule
    # a slow first step (noise) does not end the L3 before it starts
    assert host.l3_from_ladder(plan, _ladder_values([20e9, 90e9, 80e9, 12e9])).usable_bytes == 16 * MIB
    # no step faster than DRAM: the L3's size is the first step, its bandwidth is left to the clamp
    slow = host.l3_from_ladder(plan, _ladder_values([8e9, 7e9, 6e9, 5e9]))
    assert slow.usable_bytes == 4 * MIB and slow.bandwidth_bytes_per_s == 8e9 and "no L3 working set" in slow.rule
    assert host.l3_from_ladder(dataclasses.replace(plan, l3_ladder=()), {}) is None


def test_a_soft_l3_edge_is_measured_from_the_step_past_the_knee() -> None:
    """The AMD EPYC guest's ladder (docs/calibration.md): 8 MiB at L3 speed, 16 MiB half way to DRAM."""
    plan = probe_plan(fake_info())  # ladder 4, 8, 16, 32 MiB
    soft = host.l3_from_ladder(plan, _ladder_values([41.2e9, 41.8e9, 19.1e9, 13.3e9], dram=12.3e9))
    assert soft.usable_bytes == 8 * MIB and soft.bandwidth_bytes_per_s == 41.2e9
    share = (1 / 19.1e9 - 1 / 12.3e9) / (1 / 41.2e9 - 1 / 12.3e9)  # of the bytes from the L3 at 16 MiB: ~0.51
    assert soft.spill_bytes == int(8 * MIB * 2 ** (1 / (1 - share)))  # the share reaches 0 near 33 MiB
    assert 32 * MIB < soft.spill_bytes < 34 * MIB and "51% of the bytes from the L3" in soft.spill_rule
    # a sharp edge: the next step already runs at DRAM speed, so the share is 0 there
    sharp = host.l3_from_ladder(plan, _ladder_values([41.2e9, 41.8e9, 12.0e9, 12.0e9], dram=12.3e9))
    assert sharp.usable_bytes == 8 * MIB and sharp.spill_bytes == 16 * MIB
    # no knee inside the ladder: nothing measured past it
    assert host.l3_from_ladder(plan, _ladder_values([50e9, 52e9, 55e9, 51e9])).spill_bytes == 0


def test_intel_kvm_guest_symptoms_are_gone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 11: the old sizes probed the "L3" with two 120 MiB arrays (DRAM, read slower than the DRAM
    probe) and kept a 480 MiB L3; the new spec is consistent and its L3 is the capped share.
    (How ops are priced with it: tests/simulator/lowering/test_lowering_cpu.py.)"""
    old_l3_probe = physical_copy_bw(480 * MIB // 4, 10)
    assert old_l3_probe < physical_copy_bw(256 * MIB, 3)  # the symptom, reproduced by the fake machine
    dev = intel_guest_spec(monkeypatch, tmp_path)
    dram, l3, l2 = (dev.level(n) for n in ("dram", "l3", "l2"))
    assert l3.capacity_bytes == TRUE_L3 == 8 * MIB and l2.capacity_bytes == 2 * MIB  # the knee of the fake curve
    assert l2.read_bandwidth_bytes_per_s >= l3.read_bandwidth_bytes_per_s >= dram.read_bandwidth_bytes_per_s
    assert l3.read_bandwidth_bytes_per_s == BW["l3"] and dram.read_bandwidth_bytes_per_s == BW["dram"]
    assert "clamped" not in dev.source_of("memory.l3.read_bandwidth_bytes_per_s").source
    note = dev.source_of("memory.l3.capacity_bytes").note
    assert "480 MiB in all" in note and "usable per instance 8 MiB: measured" in note


# ------------------------------------------------------------------------------------------------
# the probe cache


def test_cache_hit_miss_on_a_changed_key_and_disabled(fake_probes: dict[str, int], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    info = fake_info()
    first = probe_host(info)
    assert first.cache_status == "miss; written" and fake_probes["runs"] == 1
    path = Path(first.cache_file)
    assert path.parent == tmp_path / "cache" and path.name.startswith("host-probe-") and path.suffix == ".json"
    rec = json.loads(path.read_text())
    assert rec["key_fields"]["model_name"] == info.model_name and rec["key_fields"]["probe_version"] == host.PROBE_VERSION
    second = probe_host(info)
    assert second.cache_status == "miss; written earlier in this process" and second.values == first.values
    new_process()
    third = probe_host(info)
    assert third.cache_status == "hit" and fake_probes["runs"] == 1 and third.values == first.values
    # another memory size, core count or cache size is another machine: probed again, another file
    for changed in (dataclasses.replace(info, memory_bytes=32 * GIB), dataclasses.replace(info, cores=1),
                    dataclasses.replace(info, caches={**info.caches, "l2": (1 * MIB, 2 * MIB)})):
        again = probe_host(changed)
        assert again.cache_status == "miss; written" and again.cache_file != first.cache_file
    assert fake_probes["runs"] == 4
    monkeypatch.setattr(host, "PROBE_VERSION", host.PROBE_VERSION + 1)
    assert probe_host(info).cache_status == "miss; written" and fake_probes["runs"] == 5
    monkeypatch.setenv("NODEPERF_NO_CACHE", "1")
    assert probe_cache_dir() is None
    off = probe_host(info)
    assert off.cache_status == "disabled" and off.cache_file == "" and fake_probes["runs"] == 6


def test_a_probe_timed_on_a_busy_machine_is_replaced_by_a_quieter_run(fake_probes: dict[str, int],
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    info = fake_info()  # 2 online CPUs
    monkeypatch.setattr(host, "_load_average", lambda: 3.0)
    with caplog.at_level(logging.WARNING, logger="hwmodels.host"):
        busy = probe_host(info)
    assert busy.cache_status == "miss; written" and busy.load_average == 3.0
    assert any("busy machine (1-minute load average 3 on 2 CPUs)" in r.getMessage() for r in caplog.records)
    new_process()
    assert probe_host(info).cache_status == "hit"  # still busy: nothing better to be had
    monkeypatch.setattr(host, "_load_average", lambda: 0.5)
    quiet = probe_host(info)
    assert quiet.cache_status == "stale (timed at load 3 on 2 CPUs, now 0.5); written" and fake_probes["runs"] == 2
    monkeypatch.setattr(host, "_load_average", lambda: 1.9)
    new_process()
    assert probe_host(info).cache_status == "hit" and fake_probes["runs"] == 2  # a quiet probe is kept


@pytest.mark.parametrize("garbage", ["{not json", '{"schema": "other"}', "[]",
                                     "VALUES_NEGATIVE", "VALUES_MISSING", b"\xff\xfe"])
def test_a_corrupt_cache_file_is_ignored_with_a_warning_and_rewritten(
        fake_probes: dict[str, int], garbage: str | bytes, caplog: pytest.LogCaptureFixture) -> None:
    info = fake_info()
    good = probe_host(info)
    path = Path(good.cache_file)
    rec = json.loads(path.read_text())
    if garbage == "VALUES_NEGATIVE":
        rec["values"]["dram_bw"] = -1.0
        path.write_text(json.dumps(rec))
    elif garbage == "VALUES_MISSING":
        del rec["values"]["l3_ladder_0"]
        path.write_text(json.dumps(rec))
    elif isinstance(garbage, bytes):
        path.write_bytes(garbage)
    else:
        path.write_text(garbage)
    with caplog.at_level(logging.WARNING, logger="hwmodels.host"):
        again = probe_host(info)
    assert again.cache_status.startswith("corrupt (") and again.cache_status.endswith("; written")
    assert fake_probes["runs"] == 2 and again.values == good.values
    assert any(str(path) in r.getMessage() and "probing again" in r.getMessage() for r in caplog.records)
    new_process()
    assert probe_host(info).cache_status == "hit"  # rewritten


def test_cache_folder_rules_and_an_unwritable_folder(fake_probes: dict[str, int], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("NODEPERF_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probe_cache_dir() == tmp_path / "xdg" / "nodeperf"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert probe_cache_dir() == tmp_path / "home" / ".cache" / "nodeperf"
    for off in ("0", "false", ""):
        monkeypatch.setenv("NODEPERF_NO_CACHE", off)
        assert probe_cache_dir() is not None
    monkeypatch.delenv("NODEPERF_NO_CACHE")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("NODEPERF_CACHE_DIR", str(blocker / "sub"))  # a folder that cannot be made
    with caplog.at_level(logging.WARNING, logger="hwmodels.host"):
        res = probe_host(fake_info())
    assert "not written" in res.cache_status and res.values["dram_bw"] == BW["dram"]
    assert any("cannot write" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------------
# detection without /sys, /proc or lscpu


@pytest.fixture
def no_lscpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(host, "_LSCPU", str(tmp_path / "no-such-lscpu"))
    return tmp_path


def test_missing_sys_falls_back_with_warnings_not_defaults(no_lscpu: Path, monkeypatch: pytest.MonkeyPatch,
                                                           fake_probes: dict[str, int],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(host, "_SYSFS", no_lscpu / "no-sys")
    info = read_host_info()
    assert info.caches == {} and "none readable" in info.cache_source
    assert any("no cache sizes readable" in f for f in info.fallbacks)
    assert info.online_cpus >= 1 and info.cores >= 1
    with caplog.at_level(logging.WARNING, logger="hwmodels.host"):
        dev = detect_host(info)
    assert [lv.name for lv in dev.memory] == ["dram"]  # no invented cache levels
    assert any("no cache sizes readable" in r.getMessage() for r in caplog.records)
    assert probe_plan(info).l3_ladder == () and probe_plan(info).l2_bytes == 0


def test_missing_proc_too_uses_stated_fallbacks(no_lscpu: Path, monkeypatch: pytest.MonkeyPatch,
                                                fake_probes: dict[str, int]) -> None:
    monkeypatch.setattr(host, "_SYSFS", no_lscpu / "no-sys")
    monkeypatch.setattr(host, "_PROCFS", no_lscpu / "no-proc")
    info = read_host_info()
    assert info.clock_hz == host.ASSUMED_CLOCK_HZ and info.clock_source.startswith("assumed: ")
    assert info.memory_bytes > 0 and info.memory_source.startswith("sysconf")
    assert info.simd_bits in (64, 128) and info.simd_source.startswith("assumed: ")
    assert len(info.fallbacks) >= 4
    dev = detect_host(info)
    assert dev.compute.tensor_flops_per_s["fp32"] > 0
    assert dev.source_of("clock.boost_hz").source.startswith("assumed: ")
    assert dev.source_of("memory.dram.capacity_bytes").source.startswith("sysconf")


def _write(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_caches_and_sharing_from_a_sys_tree_when_lscpu_is_missing(no_lscpu: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sysfs = no_lscpu / "sys"
    _write(sysfs / "devices/system/cpu/online", "0-3\n")
    cache = sysfs / "devices/system/cpu/cpu0/cache"
    for i, (level, typ, size, shared) in enumerate([("1", "Data", "48K", "0"), ("1", "Instruction", "32K", "0"),
                                                    ("2", "Unified", "2048K", "0"), ("3", "Unified", "480M", "0-3")]):
        for name, text in (("level", level), ("type", typ), ("size", size), ("shared_cpu_list", shared)):
            _write(cache / f"index{i}" / name, text + "\n")
    _write(cache / "uevent", "")  # not an index* entry
    monkeypatch.setattr(host, "_SYSFS", sysfs)
    info = read_host_info()
    assert info.cache_source == "/sys/devices/system/cpu/cpu0/cache"
    assert info.caches == {"l1d": (48 * KIB, 4 * 48 * KIB), "l1i": (32 * KIB, 4 * 32 * KIB),
                           "l2": (2 * MIB, 8 * MIB), "l3": (480 * MIB, 480 * MIB)}
    assert info.cache_sharing == {"l1d": 1, "l1i": 1, "l2": 1, "l3": 4} and info.online_cpus == 4


def test_an_unreadable_sys_file_is_skipped(no_lscpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sysfs = no_lscpu / "sys"
    cache = sysfs / "devices/system/cpu/cpu0/cache/index0"
    _write(cache / "level", "2\n")
    _write(cache / "type", "Unified\n")
    (cache / "size").mkdir()  # reading it raises IsADirectoryError (an OSError), like a permission error
    monkeypatch.setattr(host, "_SYSFS", sysfs)
    info = read_host_info()
    assert info.caches == {} and any("no cache sizes readable" in f for f in info.fallbacks)


def test_hypervisor_sources(monkeypatch: pytest.MonkeyPatch, no_lscpu: Path) -> None:
    assert host._hypervisor({"Hypervisor vendor": "KVM"}, frozenset()) == ("KVM", "lscpu: Hypervisor vendor")
    assert host._hypervisor({}, frozenset({"hypervisor"}))[1] == "/proc/cpuinfo flags: hypervisor"
    monkeypatch.setattr(host, "_SYSFS", no_lscpu / "sys")
    _write(no_lscpu / "sys/hypervisor/type", "xen\n")
    assert host._hypervisor({}, frozenset()) == ("xen", "/sys/hypervisor/type")
    (no_lscpu / "sys/hypervisor/type").unlink()
    assert host._hypervisor({}, frozenset())[0] == ""


def test_the_real_host_is_read_without_errors() -> None:
    info = read_host_info()
    assert info.cores >= 1 and info.logical_cpus >= 1 and info.clock_hz > 0 and info.memory_bytes > 0
    assert info.clock_source and info.cache_source and info.hypervisor_source
    plan = probe_plan(info)
    if "l3" in info.caches:
        assert plan.l3_ladder and max(plan.l3_ladder) <= plan.l3_top_bytes <= info.caches["l3"][0]


def test_copy_probe_source_and_destination_sit_half_a_page_apart() -> None:
    # two back-to-back mallocs of a page multiple land 16 bytes apart modulo 4 KiB, where a copy's loads
    # falsely wait on its stores (measured 3.5 GB/s instead of 40-65 on an AMD EPYC guest): the probe
    # places them 2048 bytes apart modulo 4 KiB, the first one page-aligned, without overlap
    import numpy as np

    for n, dtype in ((1, np.float64), (16384, np.float64), (65536, np.float32), (1000, np.float32)):
        a, b = host.skewed_pair(n, dtype)
        assert a.size == b.size == n and a.dtype == b.dtype == np.dtype(dtype)
        assert a.ctypes.data % 4096 == 0 and (b.ctypes.data - a.ctypes.data) % 4096 == 2048
        assert not np.shares_memory(a, b)


@pytest.mark.parametrize(("flags", "bf16", "fp16"), [
    ({"avx2", "fma", "f16c"}, False, False),                                  # Zen 3, Haswell-Skylake client
    ({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, True, False),   # Skylake-SP .. Zen 4
    ({"avx2", "avx512f", "avx512bw", "avx512vl"}, False, False),              # BW + VL without DQ
    ({"avx2", "avx512bw", "avx512vl", "avx512dq", "avx512_fp16", "amx_bf16"}, True, True),  # Sapphire Rapids
    ({"avx2", "avx_ne_convert"}, True, True),                                 # Sierra Forest, Arrow Lake
])
def test_pytorch_low_precision_path_follows_the_onednn_isa_check(flags: set[str], bf16: bool, fp16: bool,
                                                                 fake_probes: dict[str, int],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    info = fake_info(flags=frozenset(flags))
    assert host.low_precision_library(info, "bf16")[0] is bf16
    assert host.low_precision_library(info, "fp16")[0] is fp16
    # the spec prices the dtypes without the path at the portable loops' rate: one thread, whatever the cores
    spec = detect_host(info)
    expect = {dt for dt, ok in (("bf16", bf16), ("fp16", fp16)) if not ok}
    assert set(spec.cpu.reference_gemm_flops_per_s) == expect
    for dt in expect:
        assert spec.cpu.reference_gemm_flops_per_s[dt] == pytest.approx(2.0e9 * host.REFERENCE_GEMM_FLOP_PER_CYCLE)
        assert "portable GEMM loops" in spec.provenance[f"cpu.reference_gemm_flops_per_s.{dt}"].note


@pytest.mark.parametrize(("flags", "bf16"), [({"asimd", "fphp", "asimdhp"}, False),       # Neoverse N1
                                             ({"asimd", "asimdhp", "bf16", "i8mm"}, True)])  # Neoverse V1/V2
def test_arm64_follows_the_bf16_extension_and_never_takes_onednn_for_fp16(flags: set[str], bf16: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.platform, "machine", lambda: "aarch64")
    info = fake_info(flags=frozenset(flags), vendor_id="ARM")
    assert host.low_precision_library(info, "bf16")[0] is bf16
    ok, why = host.low_precision_library(info, "fp16")
    assert not ok and "x86-64 only" in why and "assumed" in why
    monkeypatch.setattr(host.platform, "machine", lambda: "riscv64")
    assert host.low_precision_library(fake_info(flags=frozenset()), "bf16")[0] is True

"""How concurrent kernels share one device: SM slots by occupancy and waves, bandwidth and power by demand.

A kernel's standalone cost (an :class:`~simulator.report.OpCost` from
:func:`~simulator.engines.analytical.evaluate`) is split into a :class:`KernelDemand`:

* a **fixed** part, ``time_s - work_s`` (launch floor, pipeline prologue and epilogue, DRAM
  latency, split-K fixup): it runs first, at its own pace, whatever else runs;
* a **work** part, ``work_s = max(compute_s, memory_s)``, which needs the device's shared
  resources: its **SM slots** (the fraction of the device's CTA residency its grid occupies),
  and per second of standalone work ``dram_bytes / work_s`` of DRAM bandwidth,
  ``l2_bytes / work_s`` of L2 bandwidth, host-link bandwidth for copies, its average dynamic
  power ``dynamic_energy_j / time_s``, and ``compute_s / work_s`` of the arithmetic of the SMs
  its grid spans (kernels whose CTAs share SMs share those SMs' arithmetic).

:func:`share` divides the device among the kernels running at one instant:

1. **SM slots**, non-preemptively. A kernel keeps the slots it holds (up to what its current wave
   needs); slots that are free go to the kernels that need more, in ``(priority, arrival)``
   order, so a higher-priority kernel gets freed SMs first but never takes them from a running
   kernel. A kernel's need is its grid's footprint: ``min(1, ctas / (units x ctas_per_sm))`` for
   its first waves and, in its last (partial) wave, the fraction of the slots that wave fills; so
   a kernel whose grid fills the device leaves nothing to others until its last wave. Kernels
   whose record has no launch geometry (streaming kernels) need the fraction of the SMs their
   arithmetic keeps busy, ``compute_s / work_s``, and at least one CTA slot. Copies (no SM
   footprint) run on the copy engines and take no slot.
2. **Speed** (fraction of the standalone speed of the work part): at most
   ``held slots / needed slots``, and such that no shared resource (the SMs' arithmetic, DRAM,
   L2, host link per direction, power budget ``tdp_w - idle_w``) is used beyond its capacity. Speeds are the
   max-min fair point found by progressive filling (processor sharing): each kernel's share of
   the resource it uses most (its dominant share, as in dominant-resource fairness) rises at the
   same pace for all; a kernel stops rising at its slot cap or when a resource it uses is
   saturated. On one resource this is plain processor sharing: every kernel gets an equal share
   unless it needs less, and what it leaves goes to the others.

Alone, a kernel gets all the slots it needs and no resource is over its capacity (a record's
standalone demand is at most the capacity, clamped where two models' efficiency fields differ),
so it runs at speed 1 and takes exactly its record's ``time_s``. :class:`FluidDevice` integrates
the fluid model between events (arrivals, phase ends, wave tails, completions) and is what the
discrete-event engine uses; :func:`run_concurrent` runs a set of kernels that arrive at given
times, which is the whole sharing model in one call (as the real-time scheduler needs it).

Examples
--------
Two identical memory-bound kernels launched together take twice as long as one:

>>> cap = DeviceCapacity(name="toy", units=4, max_ctas_per_sm=32, dram_bytes_per_s=1e12,
...                      l2_bytes_per_s=4e12)
>>> k = KernelDemand("copy", time_s=1e-3, work_s=1e-3, dram_bytes=1e9, l2_bytes=1e9, sm_fraction=0.1)
>>> [round(end * 1e3, 9) for _, end in run_concurrent(cap, [(0.0, k), (0.0, k)])]
[2.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from hwmodels.spec import DeviceSpec
from simulator.report import OpCost

__all__ = ["DeviceCapacity", "KernelDemand", "Running", "Share", "share", "FluidDevice", "run_concurrent",
           "RESOURCES", "LIMITS"]

#: Shared resources besides the SM slots (capacities in :class:`DeviceCapacity`).
RESOURCES: tuple[str, ...] = ("compute", "dram", "l2", "host_h2d", "host_d2h", "power")
#: What limits a kernel's speed (:attr:`Share.limit`): nothing ("": standalone speed), its fixed
#: part, missing SM slots, a saturated resource, or waiting for its first slot.
LIMITS: tuple[str, ...] = ("", "fixed", "sm", *RESOURCES, "waiting")

# Capacities are normalised to 1; a remainder below this counts as used up (float rounding only).
_EPS = 1e-12


@dataclass(frozen=True)
class DeviceCapacity:
    """What one device offers to the kernels running on it (SI units).

    Attributes
    ----------
    name
        The device's name (messages only).
    units
        SMs / compute units.
    max_ctas_per_sm
        Resident CTAs per SM (``sm.max_ctas_per_sm``; 1 for devices without SMs): a kernel needs
        at least one CTA slot, ``1 / (units x max_ctas_per_sm)`` of the device, to run.
    dram_bytes_per_s
        Achievable main-memory bandwidth: read bandwidth x ``efficiency.dram_bandwidth_fraction``
        (the figure the kernel models divide DRAM bytes by).
    l2_bytes_per_s
        Achievable L2 bandwidth: read bandwidth x the larger of ``efficiency.l2_bandwidth_fraction``
        and ``efficiency.l2_tile_bandwidth_fraction``; ``inf`` for a device without an L2 level.
    host_bytes_per_s
        Host link bandwidth per direction (the device's link named ``host``), shared by the copy
        engines of that direction; 0 when the device has none (copies then cannot run).
    power_budget_w
        Dynamic power the kernels may draw together, ``power.tdp_w - power.idle_w``; ``inf`` when
        the power cap is off.
    """

    name: str
    units: int
    max_ctas_per_sm: int
    dram_bytes_per_s: float
    l2_bytes_per_s: float = math.inf
    host_bytes_per_s: float = 0.0
    power_budget_w: float = math.inf

    @classmethod
    def of(cls, device: DeviceSpec, *, power_cap: bool = True) -> DeviceCapacity:
        """The capacity of ``device`` (``power_cap``: the TDP limits concurrent kernels together)."""
        eff = device.efficiency
        main = device.main_memory
        l2 = next((lv for lv in device.memory if lv.name.lower() in ("l2", "llc", "l2_cache")), None)
        l2_bw = math.inf
        if l2 is not None and l2 is not main:
            l2_bw = float(l2.read_bandwidth_bytes_per_s) * max(float(eff.l2_bandwidth_fraction),
                                                               float(eff.l2_tile_bandwidth_fraction))
        host = next((lk for lk in device.links if lk.name == "host"), None)
        budget = float(device.power.tdp_w) - float(device.power.idle_w)
        return cls(
            name=device.name, units=int(device.compute.units),
            max_ctas_per_sm=int(device.sm.max_ctas_per_sm) if device.sm is not None else 1,
            dram_bytes_per_s=float(main.read_bandwidth_bytes_per_s) * float(eff.dram_bandwidth_fraction),
            l2_bytes_per_s=l2_bw,
            host_bytes_per_s=float(host.bandwidth_bytes_per_s) if host is not None else 0.0,
            power_budget_w=max(budget, 0.0) if power_cap else math.inf,
        )

    @property
    def slot(self) -> float:
        """One CTA slot as a fraction of the device."""
        return 1.0 / (max(self.units, 1) * max(self.max_ctas_per_sm, 1))

    def capacity_of(self, resource: str) -> float:
        """Capacity of one of :data:`RESOURCES` (B/s; W for ``power``; 1 for ``compute``, already a fraction)."""
        return {"compute": 1.0, "dram": self.dram_bytes_per_s, "l2": self.l2_bytes_per_s, "host_h2d": self.host_bytes_per_s,
                "host_d2h": self.host_bytes_per_s, "power": self.power_budget_w}[resource]


@dataclass(frozen=True)
class KernelDemand:
    """What one kernel asks of the device, from its standalone cost.

    Attributes
    ----------
    name
        The kernel (op) name.
    time_s
        Standalone time (s): the fixed part, then the work part.
    work_s
        The part of ``time_s`` that needs the shared resources (s), ``max(compute_s, memory_s)``.
    dram_bytes, l2_bytes
        Main-memory and L2 traffic of the work part (bytes).
    h2d_bytes, d2h_bytes
        Host-to-device and device-to-host bytes over the host link (copies; bytes).
    dynamic_energy_j
        Dynamic energy of the whole kernel (J); drawn at ``dynamic_energy_j / time_s`` W at speed 1.
    compute_fraction
        Fraction of the device's arithmetic throughput (all SMs' issue slots) its work part keeps
        busy at speed 1, in [0, 1]: ``compute_s / work_s`` times the fraction of the SMs its grid
        spans. Kernels whose CTAs share SMs also share those SMs' arithmetic.
    sm_fraction
        Fraction of the device's CTA slots the kernel fills in its first waves, in (0, 1]; 0 for a
        copy, which runs on a copy engine.
    tail_sm_fraction
        Fraction it fills in its last wave (``sm_fraction`` when there is no partial last wave).
    tail_work_fraction
        Fraction of ``work_s`` done in that last wave (0: no tail).
    priority
        Lower runs first (CUDA convention: a more negative stream priority is more urgent).
    """

    name: str
    time_s: float
    work_s: float
    dram_bytes: float = 0.0
    l2_bytes: float = 0.0
    h2d_bytes: float = 0.0
    d2h_bytes: float = 0.0
    dynamic_energy_j: float = 0.0
    compute_fraction: float = 0.0
    sm_fraction: float = 1.0
    tail_sm_fraction: float = -1.0  # < 0: same as sm_fraction
    tail_work_fraction: float = 0.0
    priority: int = 0

    def __post_init__(self) -> None:
        problems = []
        for f in ("time_s", "work_s", "dram_bytes", "l2_bytes", "h2d_bytes", "d2h_bytes", "dynamic_energy_j"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                problems.append(f"{f}: got {v!r}; expected a finite number >= 0")
        if not problems and self.work_s > self.time_s:
            problems.append(f"work_s: got {self.work_s!r}; expected at most time_s = {self.time_s!r}")
        if not 0.0 <= self.compute_fraction <= 1.0:
            problems.append(f"compute_fraction: got {self.compute_fraction!r}; expected a fraction in [0, 1]")
        if not 0.0 <= self.sm_fraction <= 1.0:
            problems.append(f"sm_fraction: got {self.sm_fraction!r}; expected a fraction in [0, 1]")
        if self.tail_sm_fraction >= 0 and not 0.0 < self.tail_sm_fraction <= max(self.sm_fraction, 0.0) + _EPS:
            problems.append(f"tail_sm_fraction: got {self.tail_sm_fraction!r}; expected in (0, sm_fraction]")
        if not 0.0 <= self.tail_work_fraction < 1.0:
            problems.append(f"tail_work_fraction: got {self.tail_work_fraction!r}; expected in [0, 1)")
        if problems:
            raise ValueError(f"kernel {self.name!r}: " + "; ".join(problems))

    @property
    def fixed_s(self) -> float:
        """The fixed part (s): runs at its own pace whatever else runs."""
        return self.time_s - self.work_s

    @property
    def copy(self) -> bool:
        """Runs on a copy engine (no SM slots)."""
        return self.sm_fraction == 0.0

    @property
    def power_w(self) -> float:
        """Average dynamic power at standalone speed (W)."""
        return self.dynamic_energy_j / self.time_s if self.time_s > 0 else 0.0

    def boundaries(self) -> tuple[float, ...]:
        """Standalone seconds at which its phases end: fixed, full waves, last wave (empty ones dropped)."""
        fixed = self.fixed_s
        out = [fixed] if fixed > 0 else []
        if self.tail_work_fraction > 0 and self.work_s > 0:
            cut = fixed + self.work_s * (1.0 - self.tail_work_fraction)
            if out == [] or cut > out[-1]:
                out.append(cut)
        if not out or self.time_s > out[-1]:
            out.append(self.time_s)
        return tuple(out)

    def need(self, done_s: float, phase: int | None = None) -> float:
        """SM-slot fraction needed after ``done_s`` standalone seconds (or in phase ``phase``)."""
        if self.copy:
            return 0.0
        tail = self.tail_sm_fraction if self.tail_sm_fraction >= 0 else self.sm_fraction
        if self.tail_work_fraction <= 0 or self.work_s <= 0:
            return self.sm_fraction
        cut = self.fixed_s + self.work_s * (1.0 - self.tail_work_fraction)
        if phase is not None:
            bounds = self.boundaries()
            start = bounds[phase - 1] if phase > 0 else 0.0
            return tail if start >= cut else self.sm_fraction
        return tail if done_s >= cut else self.sm_fraction

    def per_speed(self, cap: DeviceCapacity, need: float | None = None) -> dict[str, float]:
        """Fraction of each resource's capacity the work part uses at speed 1 (each clamped to 1).

        ``need``: the slots of its current wave (default ``sm_fraction``); in a last wave that
        fills fewer slots, its arithmetic spans proportionally fewer SMs.
        """
        out: dict[str, float] = {}
        if self.work_s <= 0:
            return out
        if self.compute_fraction > 0:
            scale = 1.0 if need is None or self.sm_fraction <= 0 else min(1.0, need / self.sm_fraction)
            out["compute"] = min(1.0, self.compute_fraction * scale)
        for res, amount in (("dram", self.dram_bytes / self.work_s), ("l2", self.l2_bytes / self.work_s),
                            ("host_h2d", self.h2d_bytes / self.work_s), ("host_d2h", self.d2h_bytes / self.work_s),
                            ("power", self.power_w)):
            if amount <= 0:
                continue
            c = cap.capacity_of(res)
            if c == math.inf:
                continue
            out[res] = min(1.0, amount / c) if c > 0 else math.inf
        return out

    @classmethod
    def from_record(cls, record: OpCost, capacity: DeviceCapacity, *, priority: int = 0) -> KernelDemand:
        """The demand of an op's standalone record (see the module docstring for the split).

        Launch geometry: a record with ``ctas`` (GEMM, convolution, attention) fills
        ``waves = ctas / (units x ctas_per_sm)`` of the device (``ctas_per_sm`` 1 when the rule
        does not report it); with more than one wave it fills the device until its last wave,
        which does ``1 / ceil(waves)`` of the work on ``waves - ceil(waves) + 1`` of the slots.
        Without geometry it needs ``compute_s / work_s`` of the slots (at least one CTA slot).
        Its arithmetic keeps ``compute_s / work_s`` of the SMs it spans busy
        (``min(1, ctas / units)`` of the device with geometry, all of it without).
        """
        t = float(record.time_s)
        work = min(max(float(record.compute_s), float(record.memory_s), 0.0), t)
        tail_frac, tail_work = -1.0, 0.0
        busy = float(record.compute_s) / work if work > 0 else 0.0
        spanned = min(1.0, record.ctas / max(capacity.units, 1)) if record.ctas > 0 else 1.0
        if record.ctas > 0:
            occ = record.ctas_per_sm if record.ctas_per_sm > 0 else 1
            waves = record.ctas / (max(capacity.units, 1) * occ)
            if waves <= 1.0:
                frac = waves
            else:
                frac = 1.0
                n = math.ceil(waves)
                last = waves - (n - 1)
                if last < 1.0:
                    tail_frac, tail_work = last, 1.0 / n
        else:
            frac = busy
        frac = min(1.0, max(frac, capacity.slot))
        if tail_frac >= 0:
            tail_frac = min(frac, max(tail_frac, capacity.slot))
        return cls(name=record.name, time_s=t, work_s=work, dram_bytes=float(record.dram_bytes),
                   l2_bytes=float(record.l2_bytes), dynamic_energy_j=float(record.dynamic_energy_j),
                   compute_fraction=min(1.0, busy * spanned), sm_fraction=frac, tail_sm_fraction=tail_frac, tail_work_fraction=tail_work, priority=priority)


@dataclass(frozen=True)
class Running:
    """A kernel's state at one instant, as :func:`share` reads it.

    ``done_s``: standalone seconds of it done so far (0 to ``demand.time_s``); ``held``: the SM
    slot fraction it holds (0 before it starts); ``seq``: arrival order (ties after priority).
    ``phase``: index into :meth:`KernelDemand.boundaries` (None: derived from ``done_s``).
    """

    demand: KernelDemand
    done_s: float = 0.0
    held: float = 0.0
    seq: int = 0
    phase: int | None = None

    def current_phase(self) -> int:
        """Index of the phase it is in (into :meth:`KernelDemand.boundaries`)."""
        if self.phase is not None:
            return self.phase
        bounds = self.demand.boundaries()
        return next((i for i, b in enumerate(bounds) if self.done_s < b), len(bounds) - 1)

    def in_fixed(self) -> bool:
        """Still in its fixed part."""
        return self.demand.fixed_s > 0 and self.current_phase() == 0


@dataclass(frozen=True)
class Share:
    """What one running kernel gets at an instant.

    ``held``: SM slot fraction; ``speed``: standalone seconds done per second (0 to 1);
    ``dram_bytes_per_s``, ``l2_bytes_per_s``, ``host_bytes_per_s``: bandwidth it uses; ``power_w``:
    dynamic power it draws; ``limit``: what holds its speed down (one of :data:`LIMITS`).
    """

    held: float
    speed: float
    dram_bytes_per_s: float
    l2_bytes_per_s: float
    host_bytes_per_s: float
    power_w: float
    limit: str


def share(device: DeviceCapacity | DeviceSpec, kernels: Sequence[Running]) -> list[Share]:
    """Divide ``device`` among the kernels running at one instant (one :class:`Share` each, in order).

    Parameters
    ----------
    device
        The device, or its :class:`DeviceCapacity` (a spec is read with the power cap on).
    kernels
        The kernels present: started ones (``held > 0``) and ones waiting for their first slot.

    Returns
    -------
    list of Share
        Slots are divided first (kept, then handed out in ``(priority, seq)`` order), then the
        work parts' speeds by progressive filling over the shared resources; fixed parts run at
        speed 1 and draw their power first. The totals never exceed a capacity: ``sum(held) <= 1``,
        ``sum(dram_bytes_per_s) <= dram_bytes_per_s``, and so on.
    """
    cap = device if isinstance(device, DeviceCapacity) else DeviceCapacity.of(device)
    n = len(kernels)
    need, held, runs = _divide_slots(kernels)

    speed = [0.0] * n
    limit = ["waiting"] * n
    remaining = {r: 1.0 for r in RESOURCES}
    filling: dict[int, tuple[float, dict[str, float]]] = {}  # work parts: slot cap, use per speed
    for i, k in enumerate(kernels):
        if not runs[i]:
            continue
        d = k.demand
        if k.in_fixed() or d.work_s <= 0:
            speed[i], limit[i] = 1.0, "fixed"
            if cap.power_budget_w < math.inf and d.power_w > 0:
                remaining["power"] -= d.power_w / cap.power_budget_w
            continue
        slot_cap = 1.0 if d.copy else min(1.0, held[i] / need[i])
        use = d.per_speed(cap, need[i])
        blocked = sorted(r for r, u in use.items() if u == math.inf)
        if blocked:  # needs a resource the device does not have (a copy without a host link)
            limit[i] = blocked[0]
            continue
        filling[i] = (slot_cap, use)
    for r in remaining:
        remaining[r] = max(remaining[r], 0.0)

    _fill_speeds(filling, remaining, speed, limit)

    out = []
    for i, k in enumerate(kernels):
        d = k.demand
        s = speed[i]
        use = filling[i][1] if i in filling else {}
        # what it moves: its use per speed (clamped to the capacity) times its speed
        bw = {r: use.get(r, 0.0) * cap.capacity_of(r) * s for r in ("dram", "l2", "host_h2d", "host_d2h")}
        if i in filling:
            pw = use.get("power", 0.0) * cap.power_budget_w * s if cap.power_budget_w < math.inf else d.power_w * s
        else:
            pw = d.power_w if limit[i] == "fixed" else 0.0
        out.append(Share(held=held[i] if runs[i] else 0.0, speed=s, dram_bytes_per_s=bw["dram"],
                         l2_bytes_per_s=bw["l2"], host_bytes_per_s=bw["host_h2d"] + bw["host_d2h"],
                         power_w=pw, limit=limit[i]))
    return out


def _divide_slots(kernels: Sequence[Running]) -> tuple[list[float], list[float], list[bool]]:
    """Each kernel's slot need and slots held (kept, then handed out by priority), and whether it runs."""
    n = len(kernels)
    need = [0.0] * n
    held = [0.0] * n
    for i, k in enumerate(kernels):
        need[i] = k.demand.need(k.done_s, k.current_phase())
        held[i] = min(max(k.held, 0.0), need[i])
    free = 1.0 - sum(held)
    for i in sorted(range(n), key=lambda j: (kernels[j].demand.priority, kernels[j].seq)):
        if free <= _EPS:
            break
        if need[i] > held[i]:
            g = min(need[i] - held[i], free)
            held[i] += g
            free -= g
    return need, held, [kernels[i].demand.copy or held[i] > 0 for i in range(n)]


def _fill_speeds(filling: dict[int, tuple[float, dict[str, float]]], remaining: dict[str, float],
                 speed: list[float], limit: list[str]) -> None:
    """Set the work parts' speeds and limits by dominant-resource progressive filling of ``remaining``."""
    # dominant-resource fairness: every kernel's largest share of any resource rises at the same pace
    dominant = {i: max(use.values(), default=0.0) for i, (_, use) in filling.items()}
    for i, dom in dominant.items():
        if dom <= 0:  # uses no shared resource: only its slots limit it
            slot_cap = filling[i][0]
            speed[i], limit[i] = slot_cap, ("sm" if slot_cap < 1.0 else "")
    level = 0.0
    active = {i for i, dom in dominant.items() if dom > 0}
    while active:
        load = {r: sum(filling[i][1].get(r, 0.0) / dominant[i] for i in active) for r in RESOURCES}
        top = min(filling[i][0] * dominant[i] for i in active)
        for r, s in load.items():
            if s > 0:
                top = min(top, level + remaining[r] / s)
        for r, s in load.items():
            remaining[r] -= s * (top - level)
        level = top
        saturated = {r for r, s in load.items() if s > 0 and remaining[r] <= _EPS}
        frozen = set()
        for i in active:
            slot_cap, use = filling[i]
            hit = sorted(r for r in use if r in saturated)
            if hit:
                frozen.add(i)
                speed[i] = min(level / dominant[i], slot_cap)
                limit[i] = hit[0] if speed[i] < 1.0 else ""
            elif slot_cap * dominant[i] <= level:
                frozen.add(i)
                speed[i] = slot_cap
                limit[i] = "sm" if slot_cap < 1.0 else ""
        if not frozen:  # cannot happen: the level rose to a cap or a saturation; stop rather than spin
            for i in active:
                speed[i], limit[i] = min(level / dominant[i], filling[i][0]), ""
            break
        active -= frozen


@dataclass
class _Job:
    key: Hashable
    demand: KernelDemand
    seq: int
    bounds: tuple[float, ...]
    phase: int = 0
    held: float = 0.0
    speed: float = 0.0
    limit: str = "waiting"
    anchor_t: float = 0.0
    anchor_done: float = 0.0
    start_s: float | None = None
    slowed: bool = False

    def done_at(self, now: float) -> float:
        """Standalone seconds done at ``now`` (clamped to the current phase)."""
        lo = self.bounds[self.phase - 1] if self.phase > 0 else 0.0
        hi = self.bounds[self.phase]
        return min(max(self.anchor_done + self.speed * (now - self.anchor_t), lo), hi)

    def boundary_time(self) -> float:
        """When the current phase ends at the current speed (inf when not progressing)."""
        if self.speed <= 0:
            return math.inf
        return self.anchor_t + (self.bounds[self.phase] - self.anchor_done) / self.speed


class FluidDevice:
    """The fluid sharing model over time: kernels arrive, share the device (:func:`share`) and finish.

    Call :meth:`add` when a kernel is submitted and :meth:`step` at every event time (an arrival
    or :meth:`next_event_s`); ``step`` moves the kernels on, ends phases, starts and finishes
    kernels and recomputes the shares. Between events every speed is constant, so progress is
    exact (a kernel that was never slowed finishes exactly ``time_s`` after it started).

    Attributes
    ----------
    now
        Time of the last :meth:`add`/:meth:`step` (s).
    starts, ends
        Start (first slot) and end time of each kernel key (s).
    slowed
        Keys of the kernels that ran below speed 1 at some time.
    limited_s
        Seconds during which some started kernel was held below speed 1, by the limit that held
        it (``"sm"``, ``"dram"``, ``"power"`` ...; a kernel waiting for its first slot counts as
        ``"waiting"``).
    dynamic_w_max
        Largest total dynamic power drawn by the running kernels together (W).
    """

    def __init__(self, capacity: DeviceCapacity) -> None:
        self.capacity = capacity
        self.now = 0.0
        self.starts: dict[Hashable, float] = {}
        self.ends: dict[Hashable, float] = {}
        self.slowed: set[Hashable] = set()
        self.limited_s: dict[str, float] = {}
        self.dynamic_w_max = 0.0
        self._jobs: dict[Hashable, _Job] = {}
        self._seq = 0
        self._power_w = 0.0
        self._limits: set[str] = set()

    @property
    def running(self) -> tuple[Hashable, ...]:
        """Keys of the kernels present (started or waiting), in arrival order."""
        return tuple(self._jobs)

    def add(self, key: Hashable, demand: KernelDemand, now: float) -> None:
        """Submit a kernel at ``now`` (no earlier than the last event); call :meth:`step` at ``now`` next."""
        if key in self._jobs or key in self.ends:
            raise ValueError(f"FluidDevice: kernel {key!r} submitted twice; expected each key once")
        self._advance(now)
        self._jobs[key] = _Job(key, demand, self._seq, demand.boundaries(), anchor_t=now)
        self._seq += 1

    def step(self, now: float) -> tuple[list[Hashable], list[Hashable]]:
        """Advance to ``now``; returns (kernels that started, kernels that finished) at ``now``."""
        self._advance(now)
        finished: list[Hashable] = []
        for key, job in list(self._jobs.items()):
            while job.speed > 0 and self._reached(job, now):
                if job.phase + 1 == len(job.bounds):
                    finished.append(key)
                    self.ends[key] = now
                    del self._jobs[key]
                    break
                # the next phase; the anchor stays (a kernel whose speed never changes keeps the
                # anchor of its start, so it ends exactly time_s after it); done_at() clamps to the
                # phase, so progress is exactly the boundary here
                job.phase += 1
        for key, job in list(self._jobs.items()):  # zero-length kernels finish on arrival
            if job.demand.time_s <= 0:
                self.starts.setdefault(key, now)
                self.ends[key] = now
                finished.append(key)
                del self._jobs[key]
        started = self._reshare(now)
        return started, finished

    def next_event_s(self) -> float | None:
        """Time of the next phase end (None when nothing progresses)."""
        t = min((j.boundary_time() for j in self._jobs.values()), default=math.inf)
        return t if t < math.inf else None

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _reached(job: _Job, now: float) -> bool:
        t = job.boundary_time()
        return t <= now + 8 * math.ulp(max(abs(now), abs(t), 1e-300))

    def _advance(self, now: float) -> None:
        if now < self.now:
            raise ValueError(f"FluidDevice: time went backwards; got {now!r} after {self.now!r}")
        dt = now - self.now
        if dt > 0:
            for lim in self._limits:
                self.limited_s[lim] = self.limited_s.get(lim, 0.0) + dt
        self.now = now

    def _reshare(self, now: float) -> list[Hashable]:
        jobs = list(self._jobs.values())
        states = [Running(j.demand, j.done_at(now), j.held, j.seq, j.phase) for j in jobs]
        shares = share(self.capacity, states)
        started: list[Hashable] = []
        self._limits = set()
        power = 0.0
        for j, st, sh in zip(jobs, states, shares, strict=True):
            if sh.speed != j.speed:
                j.anchor_t, j.anchor_done = now, st.done_s
                j.speed = sh.speed
            j.held, j.limit = sh.held, sh.limit
            if j.start_s is None and sh.speed > 0:
                j.start_s = now
                self.starts[j.key] = now
                started.append(j.key)
            if j.start_s is not None and sh.speed < 1.0:
                j.slowed = True
                self.slowed.add(j.key)
                self._limits.add(sh.limit)
            elif j.start_s is None:
                self._limits.add("waiting")
            power += sh.power_w
        self._power_w = power
        self.dynamic_w_max = max(self.dynamic_w_max, power)
        return started


def run_concurrent(device: DeviceCapacity | DeviceSpec, arrivals: Iterable[tuple[float, KernelDemand]]
                   ) -> list[tuple[float, float]]:
    """Run kernels that arrive at given times on one device; (start, end) of each, in input order (s).

    Each kernel is submitted at its arrival time (no stream order: everything submitted may run
    at once, as far as :func:`share` lets it). This is the sharing model without a graph.
    """
    cap = device if isinstance(device, DeviceCapacity) else DeviceCapacity.of(device)
    items = list(arrivals)
    order = sorted(range(len(items)), key=lambda i: (items[i][0], i))
    fluid = FluidDevice(cap)
    k = 0
    while k < len(order) or fluid.running:
        nxt = fluid.next_event_s()
        arrive = items[order[k]][0] if k < len(order) else math.inf
        if nxt is None and arrive == math.inf:
            raise RuntimeError(f"run_concurrent: {len(fluid.running)} kernel(s) can never run on {cap.name}; "
                               "expected every kernel to get an SM slot or a copy engine")
        now = min(arrive, nxt if nxt is not None else math.inf)
        while k < len(order) and items[order[k]][0] <= now:
            i = order[k]
            fluid.add(i, items[i][1], max(now, fluid.now))
            k += 1
        fluid.step(max(now, fluid.now))
    return [(fluid.starts[i], fluid.ends[i]) for i in range(len(items))]

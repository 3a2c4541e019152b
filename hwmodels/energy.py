"""Energy of a kernel from its work and traffic, static power over its time, and the TDP power cap.

Dynamic energy is ``flops x J/FLOP`` (by dtype and unit: tensor or vector) plus ``bytes x J/B`` at
each memory level; static energy is the device's idle power times the time. When the average power
of a kernel would exceed the board's TDP, the kernel is power-capped: clocks drop until dynamic
power fits under ``TDP - idle``, which stretches its time (the work, hence dynamic energy, is
unchanged in this first-order model). All functions broadcast over numpy arrays.

A device with DVFS data (``[dvfs]`` in its spec) is capped by a physical model instead
(:func:`sustained_clock`, :func:`dvfs_kernel`): dynamic power is ``C V(f)^2 f`` per unit of work, the
voltage follows the textbook linear V-f line from ``V(base)`` at the base clock to ``V(boost)`` at the
boost clock (flat at ``V(base)`` below base), and the kernel runs at the highest clock ``f`` at which
``idle + dynamic(f) <= TDP``. Arithmetic time scales as ``1/f`` and its energy per FLOP as
``V(f)^2``; memory time and traffic energy do not change (the memory clock is not scaled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from hwmodels.spec import DeviceSpec

__all__ = [
    "EnergyEstimate",
    "dynamic_energy",
    "power_capped_time",
    "kernel_energy",
    "voltage_fraction",
    "DvfsKernel",
    "dvfs_kernel",
    "sustained_clock",
    "path_sustained_clock",
]

ArrayLike = Any


@dataclass(frozen=True)
class EnergyEstimate:
    """Energy of one kernel (J) and the time it runs after power capping (s)."""

    time_s: ArrayLike
    dynamic_j: ArrayLike
    static_j: ArrayLike
    power_capped: ArrayLike  # bool or bool array

    @property
    def energy_j(self) -> ArrayLike:
        return self.dynamic_j + self.static_j

    @property
    def avg_power_w(self) -> ArrayLike:
        return self.energy_j / self.time_s


def dynamic_energy(
    matrix_flops: ArrayLike,
    matrix_j_per_flop: ArrayLike,
    vector_flops: ArrayLike,
    vector_j_per_flop: ArrayLike,
    bytes_by_level: dict[str, ArrayLike],
    j_per_byte_by_level: dict[str, ArrayLike],
) -> ArrayLike:
    """Dynamic energy (J): arithmetic by unit plus data movement at each level named in both maps.

    Levels present in ``bytes_by_level`` but absent from ``j_per_byte_by_level`` contribute nothing
    (the caller records that the spec has no coefficient for them).
    """
    e = np.asarray(matrix_flops, float) * matrix_j_per_flop + np.asarray(vector_flops, float) * vector_j_per_flop
    for level, b in bytes_by_level.items():
        if level in j_per_byte_by_level:
            e = e + np.asarray(b, float) * j_per_byte_by_level[level]
    return e


def power_capped_time(time_s: ArrayLike, dynamic_j: ArrayLike, idle_w: ArrayLike, tdp_w: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
    """(time after capping, capped?) so that ``dynamic_j / time + idle_w <= tdp_w``.

    A spec without a dynamic budget (``tdp_w <= idle_w``, e.g. a host CPU whose power is not
    specified) is never capped.
    """
    t = np.asarray(time_s, float)
    budget = np.asarray(tdp_w, float) - np.asarray(idle_w, float)
    dyn = np.asarray(dynamic_j, float)
    safe = np.where(budget > 0, budget, 1.0)
    t_min = np.where(budget > 0, dyn / safe, 0.0)
    capped = t_min > t * (1.0 + 1e-12)
    return np.where(capped, t_min, t), capped


def kernel_energy(
    time_s: ArrayLike, dynamic_j: ArrayLike, idle_w: ArrayLike, tdp_w: ArrayLike, cap: bool = True
) -> EnergyEstimate:
    """Energy of a kernel of ``time_s`` seconds and ``dynamic_j`` joules of work, capped at TDP if ``cap``.

    Examples
    --------
    >>> e = kernel_energy(1e-3, 0.9, idle_w=100.0, tdp_w=700.0)   # 900 W of dynamic power: capped
    >>> round(float(e.time_s) * 1e3, 3), bool(e.power_capped), round(float(e.avg_power_w))
    (1.5, True, 700)
    """
    if cap:
        t, capped = power_capped_time(time_s, dynamic_j, idle_w, tdp_w)
    else:
        t, capped = np.asarray(time_s, float), np.zeros(np.shape(time_s), bool)
    static = np.asarray(idle_w, float) * t
    if np.ndim(t) == 0:
        return EnergyEstimate(float(t), float(dynamic_j), float(static), bool(capped))
    return EnergyEstimate(t, np.asarray(dynamic_j, float) + 0 * t, static, capped)


# --------------------------------------------------------------------------------------------
# DVFS: the clock a kernel holds under the board power limit


def voltage_fraction(clock_hz: ArrayLike, base_hz: ArrayLike, boost_hz: ArrayLike,
                     base_voltage_fraction: ArrayLike) -> ArrayLike:
    """Core voltage at ``clock_hz`` as a fraction of the voltage at ``boost_hz`` (linear V-f line).

    ``V(f)/V(boost) = v0 + (1 - v0) (f - base) / (boost - base)`` between the base and boost
    clocks, with ``v0 = base_voltage_fraction``; ``v0`` below the base clock (the curve's floor) and
    1 above boost.

    Examples
    --------
    >>> round(float(voltage_fraction(1.5e9, 1e9, 2e9, 0.7)), 3)   # half way: 0.7 + 0.3 / 2
    0.85
    """
    f = np.asarray(clock_hz, float)
    lo, hi, v0 = (np.asarray(x, float) for x in (base_hz, boost_hz, base_voltage_fraction))
    span = np.where(hi > lo, hi - lo, 1.0)
    x = np.clip((f - lo) / span, 0.0, 1.0)
    return v0 + (1.0 - v0) * x


@dataclass(frozen=True)
class DvfsKernel:
    """A kernel run at the clock that fits the power limit (scalars or arrays that broadcast).

    ``clock_hz`` is the clock chosen (the reference clock when the kernel fits unthrottled);
    ``time_s``, ``compute_s`` and ``core_j`` (its arithmetic energy) are at that clock.
    """

    clock_hz: ArrayLike
    time_s: ArrayLike
    compute_s: ArrayLike
    core_j: ArrayLike
    other_j: ArrayLike
    static_j: ArrayLike
    power_capped: ArrayLike

    @property
    def dynamic_j(self) -> ArrayLike:
        return self.core_j + self.other_j

    @property
    def energy_j(self) -> ArrayLike:
        return self.dynamic_j + self.static_j

    @property
    def avg_power_w(self) -> ArrayLike:
        return self.energy_j / self.time_s


# Bisection steps of the clock solve: the bracket [0, f_ref] shrinks by 2^-60, far below any
# clock step a GPU has (MHz), so the chosen clock is exact to double precision.
_BISECTION_STEPS = 60


def dvfs_kernel(
    *,
    compute_s: ArrayLike,
    memory_s: ArrayLike,
    fixed_s: ArrayLike,
    floor_s: ArrayLike,
    core_j: ArrayLike,
    other_j: ArrayLike,
    ref_hz: ArrayLike,
    base_hz: ArrayLike,
    boost_hz: ArrayLike,
    base_voltage_fraction: ArrayLike,
    idle_w: ArrayLike,
    tdp_w: ArrayLike,
) -> DvfsKernel:
    """Run a kernel at the highest clock ``f <= ref_hz`` whose average power fits ``tdp_w``.

    The kernel's figures are given at the reference clock ``ref_hz`` (the clock its compute rates
    are quoted at). At clock ``f`` the compute time is ``compute_s * ref_hz / f``, the device time
    ``max(compute(f), memory_s) + fixed_s`` (memory and fixed latencies do not scale), the wall
    time ``max(device time, floor_s)`` (a host launch floor), the arithmetic energy
    ``core_j * (V(f) / V(ref))^2``, and ``other_j`` (data movement) is unchanged. Average power
    ``idle_w + dynamic / time`` falls monotonically with ``f``, so the clock is found by bisection;
    a device without a dynamic budget (``tdp_w <= idle_w``) runs at ``ref_hz``. A kernel whose data
    movement alone exceeds the budget (no arithmetic to slow down) keeps ``ref_hz`` and is stretched
    at constant energy, as :func:`power_capped_time` does.

    Parameters
    ----------
    compute_s, memory_s, fixed_s, floor_s
        Arithmetic time at ``ref_hz``, memory time, additive latency, and the launch floor (s).
    core_j, other_j
        Arithmetic energy at ``ref_hz`` and data-movement energy (J).
    ref_hz, base_hz, boost_hz, base_voltage_fraction
        Reference clock, and the V-f line (:func:`voltage_fraction`).
    idle_w, tdp_w
        Static power and the board power limit (W).

    Examples
    --------
    A pure-compute kernel of 1 ms drawing 200 W of dynamic power at 2 GHz on a 100 W board with
    10 W idle; V-f line 0.6 -> 1.0 between 1 and 2 GHz:

    >>> k = dvfs_kernel(compute_s=1e-3, memory_s=0.0, fixed_s=0.0, floor_s=0.0, core_j=0.2, other_j=0.0,
    ...                 ref_hz=2e9, base_hz=1e9, boost_hz=2e9, base_voltage_fraction=0.6, idle_w=10.0,
    ...                 tdp_w=100.0)
    >>> round(float(k.clock_hz) / 1e9, 4), round(float(k.avg_power_w), 6), bool(k.power_capped)
    (1.4617, 100.0, True)
    """
    args = (compute_s, memory_s, fixed_s, floor_s, core_j, other_j, ref_hz, base_hz, boost_hz,
            base_voltage_fraction, idle_w, tdp_w)
    if all(np.ndim(x) == 0 for x in args):
        return _dvfs_kernel_scalar(*(float(x) for x in args))
    c, m, fx, fl = (np.asarray(x, float) for x in (compute_s, memory_s, fixed_s, floor_s))
    ecore, eoth = np.asarray(core_j, float), np.asarray(other_j, float)
    ref = np.asarray(ref_hz, float)
    idle, tdp = np.asarray(idle_w, float), np.asarray(tdp_w, float)
    v_ref = voltage_fraction(ref, base_hz, boost_hz, base_voltage_fraction)

    def at(f: ArrayLike) -> tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike]:
        cf = c * ref / f
        t = np.maximum(np.maximum(cf, m) + fx, fl)
        v = voltage_fraction(f, base_hz, boost_hz, base_voltage_fraction) / v_ref
        core = ecore * v * v
        return t, cf, core, idle + (core + eoth) / np.where(t > 0, t, 1.0)

    t_ref, _, _, p_ref = at(ref)
    capped = (tdp > idle) & (t_ref > 0) & (p_ref > tdp * (1.0 + 1e-12))
    lo = np.zeros(np.broadcast(ref, capped).shape)  # power -> idle as f -> 0: always feasible
    hi = np.broadcast_to(ref, lo.shape).astype(float)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        _, _, _, p = at(np.where(mid > 0, mid, ref))
        ok = p <= tdp
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    f = np.where(capped, np.where(lo > 0, lo, hi), ref)
    t, cf, core, p = at(f)
    # no clock fits when data movement alone exceeds the budget (a kernel without arithmetic): the
    # whole kernel is stretched at constant energy, the first-order cap of :func:`power_capped_time`
    over = capped & (p > tdp * (1.0 + 1e-9))
    if np.any(over):
        f = np.where(over, ref, f)
        t, cf, core, _ = at(f)
        t_fit = (core + eoth) / np.where(tdp > idle, tdp - idle, 1.0)
        cf = np.where(over, cf * t_fit / np.where(t > 0, t, 1.0), cf)
        t = np.where(over, t_fit, t)
    static = idle * t
    if np.ndim(f) == 0:
        return DvfsKernel(float(f), float(t), float(cf), float(core), float(eoth), float(static), bool(capped))
    return DvfsKernel(f, t, cf, core, eoth + 0 * t, static, capped)


def _dvfs_kernel_scalar(c: float, m: float, fx: float, fl: float, ecore: float, eoth: float, ref: float,
                        lo_hz: float, hi_hz: float, v0: float, idle: float, tdp: float) -> DvfsKernel:
    """:func:`dvfs_kernel` for plain numbers (the engine's per-op call): the same steps in floats."""
    span = hi_hz - lo_hz if hi_hz > lo_hz else 1.0

    def volt(f: float) -> float:
        return v0 + (1.0 - v0) * min(1.0, max(0.0, (f - lo_hz) / span))

    v_ref = volt(ref)

    def at(f: float) -> tuple[float, float, float, float]:
        cf = c * ref / f
        t = max(max(cf, m) + fx, fl)
        v = volt(f) / v_ref
        core = ecore * v * v
        return t, cf, core, idle + (core + eoth) / (t if t > 0 else 1.0)

    t, cf, core, p = at(ref)
    capped = tdp > idle and t > 0 and p > tdp * (1.0 + 1e-12)
    f = ref
    if capped:
        lo, hi = 0.0, ref
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            if at(mid if mid > 0 else ref)[3] <= tdp:
                lo = mid
            else:
                hi = mid
        f = lo if lo > 0 else hi
        t, cf, core, p = at(f)
        if p > tdp * (1.0 + 1e-9):  # data movement alone over the budget: constant-energy stretch
            f = ref
            t, cf, core, _ = at(f)
            t_fit = (core + eoth) / (tdp - idle)
            cf, t = cf * t_fit / t, t_fit
    return DvfsKernel(f, t, cf, core, eoth, idle * t, bool(capped))


def sustained_clock(
    dynamic_w_at_ref: ArrayLike,
    *,
    ref_hz: ArrayLike,
    base_hz: ArrayLike,
    boost_hz: ArrayLike,
    base_voltage_fraction: ArrayLike,
    idle_w: ArrayLike,
    tdp_w: ArrayLike,
) -> ArrayLike:
    """Clock (Hz) a sustained compute-bound kernel holds: ``idle + P(f) = TDP``, at most ``ref_hz``.

    ``dynamic_w_at_ref`` is the kernel's dynamic power at ``ref_hz`` (e.g. energy per FLOP x the
    FLOP rate it sustains there); at clock ``f`` it draws ``dynamic_w_at_ref (f / ref) (V(f)/V(ref))^2``.
    This is :func:`dvfs_kernel` for a kernel with no memory time and no data-movement energy.

    Examples
    --------
    >>> round(float(sustained_clock(200.0, ref_hz=2e9, base_hz=1e9, boost_hz=2e9, base_voltage_fraction=0.6,
    ...                             idle_w=10.0, tdp_w=100.0)) / 1e9, 4)
    1.4617
    """
    k = dvfs_kernel(compute_s=1.0, memory_s=0.0, fixed_s=0.0, floor_s=0.0, core_j=dynamic_w_at_ref, other_j=0.0,
                    ref_hz=ref_hz, base_hz=base_hz, boost_hz=boost_hz, base_voltage_fraction=base_voltage_fraction,
                    idle_w=idle_w, tdp_w=tdp_w)
    return k.clock_hz


def path_sustained_clock(dev: DeviceSpec, dtype: str, unit: str = "tensor") -> float:
    """Clock (Hz) a sustained compute-bound kernel on one dtype path of ``dev`` holds under its TDP.

    The kernel runs the ``unit`` ("tensor": ``compute.tensor_flops_per_s``; "vector": the SIMT
    ``compute.vector_flops_per_s``) at the achievable fraction of its peak
    (``efficiency.tensor_peak_fraction`` / ``vector_peak_fraction``) and spends the spec's energy
    per FLOP of that path (``energy.tensor_j_per_flop`` / ``vector_j_per_flop``); data movement is
    left out, so this is the upper bound a real kernel of that path approaches. With ``[dvfs]``
    data it solves the V-f model (:func:`sustained_clock`); without, it is the clock equivalent of
    today's constant-energy stretch, ``sustained_hz x min(1, (TDP - idle) / P)``.

    Raises
    ------
    SpecError
        ``unit`` is not tensor/vector, or the path has no rate or no energy for ``dtype``.
    """
    from hwmodels.spec import SpecError

    if unit not in ("tensor", "vector"):
        raise SpecError(f"{dev.name}: path_sustained_clock: unknown unit; got {unit!r}; expected 'tensor' or 'vector'")
    rates = getattr(dev.compute, f"{unit}_flops_per_s")
    energies = getattr(dev.energy, f"{unit}_j_per_flop")
    for table, what in ((rates, f"compute.{unit}_flops_per_s"), (energies, f"energy.{unit}_j_per_flop")):
        if dtype not in table:
            raise SpecError(f"{dev.name}: {what}.{dtype}: missing; got {dtype!r}; expected one of "
                            f"{', '.join(table) or 'none'}")
    fraction = getattr(dev.efficiency, f"{unit}_peak_fraction")
    power = energies[dtype] * rates[dtype] * fraction
    ref = dev.clock.sustained_hz
    if dev.dvfs is None:
        budget = dev.power.tdp_w - dev.power.idle_w
        return float(ref * min(1.0, budget / power)) if power > 0 and budget > 0 else float(ref)
    return float(sustained_clock(power, ref_hz=ref, base_hz=dev.dvfs.base_hz, boost_hz=dev.clock.boost_hz,
                                 base_voltage_fraction=dev.dvfs.base_voltage_fraction,
                                 idle_w=dev.power.idle_w, tdp_w=dev.power.tdp_w))

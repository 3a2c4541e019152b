"""Energy of a kernel from its work and traffic, static power over its time, and the TDP power cap.

Dynamic energy is ``flops x J/FLOP`` (by dtype and unit: tensor or vector) plus ``bytes x J/B`` at
each memory level; static energy is the device's idle power times the time. When the average power
of a kernel would exceed the board's TDP, the kernel is power-capped: clocks drop until dynamic
power fits under ``TDP - idle``, which stretches its time (the work, hence dynamic energy, is
unchanged in this first-order model). All functions broadcast over numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EnergyEstimate", "dynamic_energy", "power_capped_time", "kernel_energy"]

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

"""Pipeline schedules in closed form: step time, bubble and activations in flight per stage.

Stage ``s`` of ``p`` takes ``f[s]`` seconds for the forward pass of one microbatch and ``b[s]`` for its
backward pass (both include the stage's sends and receives); a step runs ``m`` microbatches.

* **GPipe** (Huang et al. 2019): all forwards, then all backwards. With equal stages the step takes
  ``(m + p - 1)(f + b)``: the bubble is ``(p - 1)(f + b)``, a fraction ``(p - 1)/m`` of the work
  (Narayanan et al. 2021, Sec. 2.2.1). Every stage keeps the activations of all ``m`` microbatches.
* **1F1B** (PipeDream-Flush; ibid.): the same step time and bubble, but stage ``s`` keeps at most
  ``p - s`` microbatches in flight.
* **Interleaved 1F1B** (ibid., Sec. 2.2.2): each device holds ``v`` non-adjacent chunks of layers;
  the bubble shrinks to ``(p - 1)(f + b)/v`` (``f``, ``b``: a device's whole share), at ``v`` times
  the point-to-point messages (already in the chunks' graphs); the first stage keeps
  ``p + (p - 1)/v`` microbatches' activations (Korthikanti et al. 2022, Sec. 4.2.3:
  ``L (1 + (p - 1)/(p v))`` layers' worth).

Unequal stages (the embedding on the first, the LM head and loss on the last, uneven layer splits
such as Llama 3.1 405B's 126 layers over 8 stages) make the bubble larger than the formula: the
pipeline's steady state runs at the pace of its slowest stage. ``T = sum_s (f[s] + b[s]) + (m - 1)
max_s (f[s] + b[s])`` (fill and drain through every stage once, then one bottleneck step per
further microbatch) is exact when the last stage is the slowest, but it overcharges a bottleneck
earlier in the pipeline, whose fill overlaps the later stages' work. So for unequal stages
:func:`pipeline_time` evaluates the schedule's own pass order (:func:`device_order`) as a max-plus
recurrence: every pass starts when its device has finished the previous pass of its order and its
input has been produced (:func:`schedule_makespan`, no resources, no SimPy); with equal stages this
is the closed form, and it is exactly what the discrete-event engine
(:mod:`simulator.parallel.pipeline_des`) computes when the sends are counted in the stage times
and no data-parallel stream runs (a test enforces it). The discrete-event engine adds sends on the
links and the data-parallel gradient buckets on their own stream.
:func:`pipeline_time` returns the step time, the bubble (step time minus the bottleneck device's
busy time ``m (f + b)``) and per-stage in-flight counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PipelineTime", "pipeline_time", "in_flight", "device_order", "schedule_makespan"]


@dataclass(frozen=True)
class PipelineTime:
    """A pipeline step: ``step_s`` in all; ``busy_s`` the bottleneck device's work; ``bubble_s`` idle."""

    step_s: float
    busy_s: float
    bubble_s: float
    bottleneck_stage: int
    in_flight: tuple[float, ...]
    #: per stage, each chunk's forward and backward seconds of one microbatch as scheduled (a trace redraws the
    #: step from them); empty where the step was not scheduled from stage times (the discrete-event engine's)
    chunk_fwd_s: tuple[tuple[float, ...], ...] = ()
    chunk_bwd_s: tuple[tuple[float, ...], ...] = ()

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the step on the bottleneck device."""
        return self.bubble_s / self.step_s if self.step_s > 0 else 0.0


def in_flight(schedule: str, p: int, m: int, v: int = 1) -> tuple[float, ...]:
    """Microbatches whose activations stage ``s`` holds at its peak, per stage (see module docstring)."""
    if schedule == "gpipe":
        return tuple(float(m) for _ in range(p))
    if schedule == "1f1b":
        return tuple(float(min(m, p - s)) for s in range(p))
    if schedule == "interleaved":
        return tuple(min(float(m), (p - s) + (p - 1) / v) for s in range(p))
    raise ValueError(f"schedule: got {schedule!r}; expected gpipe, 1f1b or interleaved")


def device_order(schedule: str, p: int, m: int, s: int, v: int = 1) -> list[tuple[str, int, int]]:
    """The ordered (``"F"``/``"B"``, microbatch, virtual chunk on this device) passes of stage ``s``.

    * ``gpipe``: every forward, then every backward (in reverse microbatch order, as autograd runs them);
    * ``1f1b``: ``p - s - 1`` warm-up forwards on stage ``s``, then one forward / one backward
      alternately, then the remaining backwards;
    * ``interleaved``: with ``v`` chunks per device, forward ``k`` of the device's ``m v`` forwards
      runs chunk ``(k // p) mod v`` of microbatch ``(k // (p v)) p + k mod p``; stage ``s`` warms up
      with ``(p - s - 1) 2 + (v - 1) p`` forwards, then alternates; backwards visit chunks in reverse
      (Narayanan et al. 2021, Sec. 2.2; Megatron-LM ``schedules.py``).
    """
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]
    if schedule == "1f1b":
        return _alternate([("F", i, 0) for i in range(m)], [("B", i, 0) for i in range(m)], min(p - s - 1, m))
    if schedule == "interleaved":
        if m % p:
            raise ValueError(f"interleaved schedule: microbatches {m} not a multiple of pp {p}; expected a multiple "
                             "(as Megatron-LM requires)")
        total = m * v
        fwd = [("F", (k // (p * v)) * p + k % p, (k // p) % v) for k in range(total)]
        bwd = [("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v) for k in range(total)]
        return _alternate(fwd, bwd, min((p - s - 1) * 2 + (v - 1) * p, total))
    raise ValueError(f"schedule: got {schedule!r}; expected gpipe, 1f1b or interleaved")


def _alternate(fwd: list[tuple[str, int, int]], bwd: list[tuple[str, int, int]], warm: int
               ) -> list[tuple[str, int, int]]:
    """``warm`` forwards, then one forward / one backward alternately, then the remaining backwards."""
    order = fwd[:warm]
    for k in range(warm, len(fwd)):
        order += [fwd[k], bwd[k - warm]]
    return order + bwd[len(fwd) - warm:]


def schedule_makespan(fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]], m: int,
                      schedule: str = "1f1b") -> float:
    """Step time of ``m`` microbatches by the schedule's pass order as a max-plus recurrence.

    ``fwd_s[d][c]``/``bwd_s[d][c]``: one microbatch through chunk ``c`` of device ``d`` (model chunk
    ``c p + d``). Each pass ends at ``max(its device's previous pass, its input) + its time``: the
    forward of model chunk ``g`` needs the forward of ``g - 1``, the backward of ``g`` the backward of
    ``g + 1`` (the last chunk: its own forward).

    >>> schedule_makespan([[2.0], [1.0]], [[4.0], [2.0]], 3)  # the first stage the bottleneck
    19.0
    """
    p, v = len(fwd_s), len(fwd_s[0])
    chunks = p * v
    orders = [device_order(schedule, p, m, d, v) for d in range(p)]
    pos, free = [0] * p, [0.0] * p
    fend: list[list[float | None]] = [[None] * chunks for _ in range(m)]
    bend: list[list[float | None]] = [[None] * chunks for _ in range(m)]
    left = sum(len(o) for o in orders)
    while left:
        before = left
        for d in range(p):
            order, t = orders[d], free[d]
            while pos[d] < len(order):
                kind, i, c = order[pos[d]]
                g = c * p + d
                if kind == "F":
                    ready = 0.0 if g == 0 else fend[i][g - 1]
                else:
                    ready = fend[i][g] if g == chunks - 1 else bend[i][g + 1]
                if ready is None:
                    break
                t = max(t, ready) + (fwd_s[d][c] if kind == "F" else bwd_s[d][c])
                (fend if kind == "F" else bend)[i][g] = t
                pos[d] += 1
                left -= 1
            free[d] = t
        if left == before:  # pragma: no cover - the orders of device_order never deadlock
            raise RuntimeError(f"pipeline: the {schedule} order deadlocked")
    return max(free)


def pipeline_time(fwd_s: Sequence[float], bwd_s: Sequence[float], m: int, schedule: str = "1f1b",
                  v: int = 1, *, chunk_fwd_s: Sequence[Sequence[float]] | None = None,
                  chunk_bwd_s: Sequence[Sequence[float]] | None = None) -> PipelineTime:
    """Step time of ``m`` microbatches through stages with per-microbatch times ``fwd_s``/``bwd_s``.

    Parameters
    ----------
    fwd_s, bwd_s
        Per stage, one microbatch's forward and backward time on one device (s); for an
        interleaved schedule, a device's whole share (all its ``v`` chunks).
    m
        Microbatches per step.
    schedule, v
        ``gpipe``, ``1f1b`` or ``interleaved`` with ``v`` chunks per device.
    chunk_fwd_s, chunk_bwd_s
        Interleaved: per device, each of its ``v`` chunks' times (None: the device's share split
        equally over its chunks). Unequal stages are timed by :func:`schedule_makespan`.

    Examples
    --------
    Four equal stages, eight microbatches: ``(m + p - 1)(f + b)``.

    >>> t = pipeline_time([1.0] * 4, [2.0] * 4, m=8)
    >>> t.step_s, t.bubble_s
    (33.0, 9.0)
    """
    p = len(fwd_s)
    if p == 0 or len(bwd_s) != p:
        raise ValueError(f"pipeline: got {p} forward and {len(bwd_s)} backward stage times; expected equal, >= 1")
    if m < 1 or v < 1:
        raise ValueError(f"pipeline: got m={m}, v={v}; expected positive integers")
    work = [float(f) + float(b) for f, b in zip(fwd_s, bwd_s, strict=True)]
    slowest = max(range(p), key=lambda s: work[s])
    fill_drain = sum(work) - work[slowest]  # every other stage once, on the way in and out
    if schedule == "interleaved":
        fill_drain /= v
    busy = m * work[slowest]
    step = busy + fill_drain
    vv = v if schedule == "interleaved" else 1
    cf = [list(map(float, r)) for r in chunk_fwd_s] if chunk_fwd_s is not None else [[f / vv] * vv for f in fwd_s]
    cb = [list(map(float, r)) for r in chunk_bwd_s] if chunk_bwd_s is not None else [[b / vv] * vv for b in bwd_s]
    # the bound is exact for GPipe and 1F1B when the last stage is the slowest in its forward and in its
    # backward (it is never kept waiting; checked against the recurrence on random stages): no walk needed
    last_slowest = schedule != "interleaved" and all(
        float(fwd_s[-1]) >= float(f) and float(bwd_s[-1]) >= float(b) for f, b in zip(fwd_s, bwd_s, strict=True))
    if p > 1 and not last_slowest and (len({tuple(r) for r in cf}) > 1 or len({tuple(r) for r in cb}) > 1) \
            and not (schedule == "interleaved" and m % p):
        # unequal stages: the order itself; where it is the closed form (the last stage the slowest)
        # up to rounding, the closed form's value is kept
        exact = schedule_makespan(cf, cb, m, schedule)
        step = exact if exact < step * (1.0 - 1e-12) else step
    return PipelineTime(step_s=step, busy_s=busy, bubble_s=step - busy, bottleneck_stage=slowest,
                        in_flight=in_flight(schedule, p, m, v), chunk_fwd_s=tuple(map(tuple, cf)),
                        chunk_bwd_s=tuple(map(tuple, cb)))

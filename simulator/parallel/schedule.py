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

Unequal stages (the embedding on the first, the LM head and loss on the last) make the bubble
larger than the formula: the pipeline's steady state runs at the pace of its slowest stage, so
``T = sum_s (f[s] + b[s]) + (m - 1) max_s (f[s] + b[s])`` (fill and drain through every stage
once, then one bottleneck step per further microbatch), which is the closed form above when all
stages are equal. The interleaved schedule divides the fill and drain term by ``v``.
:func:`pipeline_time` returns the step time, the bubble (step time minus the bottleneck device's
busy time ``m (f + b)``) and per-stage in-flight counts; the discrete-event engine
(:mod:`simulator.parallel.pipeline_des`) runs the same schedules pass by pass, with sends on the
links and the data-parallel gradient buckets on their own stream, where the closed form is only
an approximation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PipelineTime", "pipeline_time", "in_flight"]


@dataclass(frozen=True)
class PipelineTime:
    """A pipeline step: ``step_s`` in all; ``busy_s`` the bottleneck device's work; ``bubble_s`` idle."""

    step_s: float
    busy_s: float
    bubble_s: float
    bottleneck_stage: int
    in_flight: tuple[float, ...]

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


def pipeline_time(fwd_s: Sequence[float], bwd_s: Sequence[float], m: int, schedule: str = "1f1b",
                  v: int = 1) -> PipelineTime:
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
    return PipelineTime(step_s=step, busy_s=busy, bubble_s=step - busy, bottleneck_stage=slowest,
                        in_flight=in_flight(schedule, p, m, v))

"""Discrete-event simulation of a pipeline-parallel training step (SimPy).

What is simulated:

* **Devices as resources.** Each pipeline device is a compute stream (a SimPy resource of capacity
  one) that runs its forward and backward passes in the schedule's order (below): a pass starts only
  when its turn has come on the device and its input has arrived.
* **Microbatches as processes.** A microbatch walks forward through every chunk of the model, then
  backward in reverse; between two devices its activation (or gradient) is a send over the link
  from one device to the next, a resource of its own (one per direction): the send occupies the link
  for its transfer time, not the sending device, so a stage's send overlaps its next compute (as
  Megatron-LM's non-blocking ``isend``/``irecv`` pairs do), and the receiver waits for the arrival
  instead of paying a receive.
* **Data-parallel gradient synchronisation on its own stream.** During the last backward pass of
  each chunk (gradients accumulate over the earlier microbatches, ``no_sync``), gradient buckets
  become ready as the backward produces them; each is reduced by one collective on the device's
  data-parallel stream (a third resource), overlapping the rest of the backward. The optimizer
  update (and, with ZeRO, the parameter all-gather) runs after the device's last pass and its last
  bucket.

Order per device (Narayanan et al. 2021, Sec. 2.2; Megatron-LM ``schedules.py`` follows the same
orders):

* ``gpipe``: every forward, then every backward (in reverse microbatch order, as autograd runs them);
* ``1f1b``: ``p - s - 1`` warm-up forwards on stage ``s``, then one forward / one backward
  alternately, then the remaining backwards;
* ``interleaved``: with ``v`` chunks per device, forward ``k`` of the device's ``m v`` forwards
  runs chunk ``(k // p) mod v`` of microbatch ``(k // (p v)) p + k mod p``; stage ``s`` warms up
  with ``(p - s - 1) 2 + (v - 1) p`` forwards, then alternates; backwards visit chunks in
  reverse.

With sends counted in the stage times (``link`` none) and no data-parallel stream, the simulated
step equals :func:`simulator.parallel.schedule.pipeline_time` exactly, equal stages or not (it
evaluates the same pass orders, :func:`~simulator.parallel.schedule.device_order`, as a max-plus
recurrence; tests enforce it on real stage graphs, uneven splits included). Where the two differ:
sends that overlap compute, and gradient buckets that finish after the backward they overlap (the
closed form assumes the whole backward hides them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import simpy

from simulator.parallel.schedule import device_order

__all__ = ["PipelineTrace", "StageWork", "Bucket", "simulate_pipeline", "simulate_step", "device_order"]


@dataclass(frozen=True)
class StageWork:
    """One microbatch through one chunk of one device.

    ``forward_s``/``backward_s``: time on the device's compute stream. ``send_forward_s``: time the
    activation occupies the link to the next chunk's device; ``send_backward_s``: the gradient's
    time on the link to the previous chunk's device (both zero when the stage times already count
    the sends, as the closed form does).
    """

    forward_s: float
    backward_s: float
    send_forward_s: float = 0.0
    send_backward_s: float = 0.0


@dataclass(frozen=True)
class Bucket:
    """A gradient bucket of chunk ``chunk``: ready ``ready_s`` after its last backward pass starts
    (when the backward has produced its last gradient), reduced in ``sync_s`` on the data-parallel stream."""

    chunk: int
    ready_s: float
    sync_s: float
    nbytes: float = 0.0


@dataclass(frozen=True)
class PipelineTrace:
    """A simulated step.

    ``step_s``: the whole step (passes, exposed gradient synchronisation and the update);
    ``passes[d]``: device ``d``'s (kind, microbatch, chunk, start_s, end_s) passes in order;
    ``sends``: (link (src, dst), kind, microbatch, start_s, end_s); ``syncs[d]``: device ``d``'s
    buckets as (start_s, end_s); ``finish_s[d]``: when device ``d`` finished its update.
    """

    step_s: float
    passes: tuple[tuple[tuple[str, int, int, float, float], ...], ...]
    sends: tuple[tuple[tuple[int, int], str, int, float, float], ...] = ()
    syncs: tuple[tuple[tuple[float, float], ...], ...] = ()
    finish_s: tuple[float, ...] = field(default=())

    def busy_s(self, device: int) -> float:
        return sum(e - s for _, _, _, s, e in self.passes[device])

    @property
    def pipeline_s(self) -> float:
        """When the last pass ended (the step without the gradient synchronisation and the update)."""
        return max((p[-1][4] for p in self.passes if p), default=0.0)

    @property
    def bubble_s(self) -> float:
        """Idle time of the busiest device during the passes."""
        return self.pipeline_s - max(self.busy_s(d) for d in range(len(self.passes)))

    def peak_in_flight(self, device: int) -> float:
        """Most microbatches whose activations ``device`` held at once (forwards run whose backward
        had not), in whole-device units: a chunk counts ``1/v`` with ``v`` chunks per device."""
        v = 1 + max((c for _, _, c, _, _ in self.passes[device]), default=0)
        held = peak = 0
        for kind, *_ in self.passes[device]:
            held += 1 if kind == "F" else -1
            peak = max(peak, held)
        return peak / v

    def last_pass_end_s(self, device: int) -> float:
        return self.passes[device][-1][4] if self.passes[device] else 0.0


def simulate_step(work: Sequence[Sequence[StageWork]], m: int, schedule: str = "1f1b", *,
                  buckets: Sequence[Sequence[Bucket]] | None = None,
                  after_s: Sequence[float] | None = None) -> PipelineTrace:
    """Simulate one training step of ``m`` microbatches.

    Parameters
    ----------
    work
        ``work[d][c]``: one microbatch through chunk ``c`` of device ``d`` (one chunk per device
        unless interleaved; chunk ``c`` of device ``d`` is model chunk ``c p + d``).
    m, schedule
        Microbatches and ``gpipe``, ``1f1b`` or ``interleaved``.
    buckets
        Per device, its gradient buckets in the order the backward produces them (none: no
        data-parallel synchronisation).
    after_s
        Per device, what runs after its last pass and last bucket (optimizer update, parameter
        all-gather).
    """
    p, v = _check_step_inputs(work, m, buckets, after_s)
    sim = _StepSim(work, m, schedule, p, v)
    for i in range(m):
        sim.env.process(sim.microbatch(i))
    n_buckets = 0
    if buckets is not None:
        for d, row in enumerate(buckets):
            for b in row:
                if not 0 <= b.chunk < v or (d, b.chunk) not in sim.last_b_start:
                    raise ValueError(f"pipeline: bucket of device {d}: chunk {b.chunk}; expected 0 .. {v - 1}")
                if not (b.ready_s >= 0.0 and b.sync_s >= 0.0):
                    raise ValueError(f"pipeline: bucket of device {d}: got ready {b.ready_s!r}, sync {b.sync_s!r}; "
                                     "expected times >= 0")
                sim.env.process(sim.bucket(d, b))
                n_buckets += 1
    sim.env.run()
    passes, syncs, chunks = sim.passes, sim.syncs, p * v
    ran = sum(len(x) for x in passes)
    if ran != 2 * m * chunks or sum(len(x) for x in syncs) != n_buckets:
        # a schedule that cannot finish is a bug in the order, never a silent result
        raise RuntimeError(f"pipeline: {2 * m * chunks - ran} passes never ran; the {schedule} order deadlocked")
    finish = []
    for d in range(p):
        end = max([passes[d][-1][4], *(e for _, e in syncs[d])])
        finish.append(end + (float(after_s[d]) if after_s is not None else 0.0))
    return PipelineTrace(step_s=max(finish), passes=tuple(tuple(x) for x in passes), sends=tuple(sim.sends),
                         syncs=tuple(tuple(x) for x in syncs), finish_s=tuple(finish))


def _check_step_inputs(work: Sequence[Sequence[StageWork]], m: int, buckets: Sequence[Sequence[Bucket]] | None,
                       after_s: Sequence[float] | None) -> tuple[int, int]:
    """Check :func:`simulate_step`'s arguments; returns (devices, chunks per device)."""
    p = len(work)
    v = len(work[0]) if p else 0
    if p == 0 or v == 0 or any(len(x) != v for x in work):
        raise ValueError("pipeline: expected one row of stage work per device, every row with the same chunks")
    if m < 1:
        raise ValueError(f"pipeline: got m={m}; expected a positive integer")
    for d, row in enumerate(work):
        for c, w in enumerate(row):
            for k in ("forward_s", "backward_s", "send_forward_s", "send_backward_s"):
                val = getattr(w, k)
                if not val >= 0.0 or val == float("inf"):
                    raise ValueError(f"pipeline: work[{d}][{c}].{k}: got {val!r}; expected a finite time >= 0")
    if buckets is not None and len(buckets) != p:
        raise ValueError(f"pipeline: got buckets for {len(buckets)} devices; expected {p}")
    if after_s is not None and len(after_s) != p:
        raise ValueError(f"pipeline: got after_s for {len(after_s)} devices; expected {p}")
    return p, v


class _StepSim:
    """The SimPy state of one :func:`simulate_step`: devices, links, each device's turns, and the records."""

    def __init__(self, work: Sequence[Sequence[StageWork]], m: int, schedule: str, p: int, v: int) -> None:
        env = self.env = simpy.Environment()
        self.work, self.p, self.chunks = work, p, p * v
        self.compute = [simpy.Resource(env, capacity=1) for _ in range(p)]
        self.links: dict[tuple[int, int], simpy.Resource] = {}
        orders = [device_order(schedule, p, m, d, v) for d in range(p)]
        # a device's turn: the event of pass k fires when pass k - 1 on that device has ended
        self.turn: list[dict[tuple[str, int, int], simpy.Event]] = []
        self.nxt: list[dict[tuple[str, int, int], simpy.Event | None]] = []
        for d in range(p):
            evs = {key: env.event() for key in orders[d]}
            if len(evs) != len(orders[d]):  # pragma: no cover - the orders list every pass once
                raise RuntimeError(f"pipeline: the {schedule} order of device {d} repeats a pass")
            self.turn.append(evs)
            self.nxt.append({key: (evs[orders[d][k + 1]] if k + 1 < len(orders[d]) else None)
                             for k, key in enumerate(orders[d])})
            evs[orders[d][0]].succeed()
        self.passes: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(p)]
        self.sends: list[tuple[tuple[int, int], str, int, float, float]] = []
        self.last_b: dict[tuple[int, int], tuple[str, int, int]] = {}
        for d in range(p):
            for key in orders[d]:
                if key[0] == "B":
                    self.last_b[(d, key[2])] = key  # the device's last backward pass of each chunk
        self.last_b_start: dict[tuple[int, int], simpy.Event] = {k: env.event() for k in self.last_b}
        self.syncs: list[list[tuple[float, float]]] = [[] for _ in range(p)]
        self.streams = [simpy.Resource(env, capacity=1) for _ in range(p)]

    def run_pass(self, d: int, key: tuple[str, int, int], dur: float):  # noqa: ANN201 - a SimPy generator
        """Run pass ``key`` on device ``d`` for ``dur`` seconds once its turn has come."""
        env = self.env
        yield self.turn[d][key]
        with self.compute[d].request() as req:
            yield req
            start = env.now
            if self.last_b.get((d, key[2])) == key:
                self.last_b_start[(d, key[2])].succeed(start)
            yield env.timeout(dur)
            self.passes[d].append((key[0], key[1], key[2], start, env.now))
        ev = self.nxt[d][key]
        if ev is not None:
            ev.succeed()

    def send(self, src: int, dst: int, kind: str, i: int, dur: float):  # noqa: ANN201 - a SimPy generator
        """Send microbatch ``i``'s activations or gradients from ``src`` to ``dst`` over their link."""
        if dur <= 0.0:
            return
        env = self.env
        link = self.links.setdefault((src, dst), simpy.Resource(env, capacity=1))
        with link.request() as req:
            yield req
            start = env.now
            yield env.timeout(dur)
            self.sends.append(((src, dst), kind, i, start, env.now))

    def microbatch(self, i: int):  # noqa: ANN201 - a SimPy process
        """Microbatch ``i`` forward through every model chunk and back."""
        p, chunks, work = self.p, self.chunks, self.work
        for g in range(chunks):  # forward through every model chunk
            d, c = g % p, g // p
            yield from self.run_pass(d, ("F", i, c), work[d][c].forward_s)
            if g < chunks - 1:
                yield from self.send(d, (g + 1) % p, "F", i, work[d][c].send_forward_s)
        for g in reversed(range(chunks)):  # and back
            d, c = g % p, g // p
            yield from self.run_pass(d, ("B", i, c), work[d][c].backward_s)
            if g > 0:
                yield from self.send(d, (g - 1) % p, "B", i, work[d][c].send_backward_s)

    def bucket(self, d: int, b: Bucket):  # noqa: ANN201 - a SimPy process
        """Synchronise gradient bucket ``b`` of device ``d`` on its stream once the backward produced it."""
        env = self.env
        start = yield self.last_b_start[(d, b.chunk)]
        ready = start + b.ready_s
        if ready > env.now:
            yield env.timeout(ready - env.now)
        with self.streams[d].request() as req:
            yield req
            s0 = env.now
            yield env.timeout(b.sync_s)
            self.syncs[d].append((s0, env.now))


def simulate_pipeline(fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]], m: int,
                      schedule: str = "1f1b", link_s: float = 0.0) -> PipelineTrace:
    """Simulate the passes of one step of ``m`` microbatches (no data-parallel stream).

    Parameters
    ----------
    fwd_s, bwd_s
        ``fwd_s[s][c]``: forward time of one microbatch through chunk ``c`` of device ``s`` (one chunk
        per device unless interleaved); the same shape for backward.
    m
        Microbatches.
    schedule
        ``gpipe``, ``1f1b`` or ``interleaved``.
    link_s
        Time an activation (or its gradient) occupies the link to the neighbouring device, beyond
        what the stage times already include.
    """
    p = len(fwd_s)
    if p == 0 or len(bwd_s) != p or any(len(f) != len(b) for f, b in zip(fwd_s, bwd_s, strict=True)):
        raise ValueError("pipeline: expected equal-shaped forward and backward times, one row per device")
    work = [[StageWork(float(f), float(b), link_s, link_s) for f, b in zip(fr, br, strict=True)]
            for fr, br in zip(fwd_s, bwd_s, strict=True)]
    return simulate_step(work, m, schedule)

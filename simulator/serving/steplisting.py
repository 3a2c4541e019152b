"""What one decode-only serving step is priced as, part by part: a listing of an
:class:`~simulator.serving.iteration.IterationPricer`'s decode step at a bucket batch, for comparing with the
kernels a serving stack launches (a profiler trace, or the stack's code read kernel by kernel).

Rows are ``(part, kind, kernels, seconds, stage)``: the token-wise work of the (padded) batch by op kind and
pipeline stage, the LM head (the last stage's), the sampler kernels, the decode attention at the mean context,
and the host parts serial with the step. Their seconds add up to what :meth:`IterationPricer.iteration` prices
for that decode-only step: with ``pp`` stages the step is the stages in turn, so every stage's rows count (a
``stage composition`` row carries what the plan's step latency adds to the stages' records, 0 in closed form).

Example
-------
>>> from simulator.hardware import load_hardware
>>> from simulator.serving.iteration import IterationPricer
>>> from workloads.parallel import ParallelPlan
>>> p = IterationPricer("llama-2-7b", load_hardware("h100-sxm5-80gb"), ParallelPlan())
>>> rows = decode_step_listing(p, 8, 256)
>>> [r.part for r in rows][:2], sum(r.kernels for r in rows if r.kind == "matmul")  # 32 layers x 4, LM head 1
(['token-wise', 'token-wise'], 129)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["StepPart", "decode_step_listing"]


@dataclass(frozen=True)
class StepPart:
    """One row of :func:`decode_step_listing`: a part of the step, the op kind (or host item), the kernels one
    device launches for it, its seconds, and the pipeline stage whose devices run it (0 without pipeline
    parallelism; the decode attention, priced for all layers at once, and the host parts: 0)."""

    part: str
    kind: str
    kernels: int
    seconds: float
    stage: int = 0


def _grouped(records: Any, keep: Any) -> dict[str, list[float]]:
    """{kind: [kernels, seconds]} of the records ``keep`` selects, in the order they first occur."""
    out: dict[str, list[float]] = {}
    for r in records:
        if keep(r):
            row = out.setdefault(r.kind, [0, 0.0])
            row[0] += int(r.kernels or 0)
            row[1] += float(r.time_s)
    return out


def _stage_rows(part: str, res: Any, keep: Any) -> list[StepPart]:
    """Rows of ``part`` from each pipeline stage's reports of a step result ``res`` (the records ``keep`` selects,
    by kind; each row one device of its stage)."""
    by_stage: dict[int, list[Any]] = {}
    for (stage, *_layers), rep in zip(res.report_layers, res.reports, strict=True):
        by_stage.setdefault(int(stage), []).extend(rep.records)
    return [StepPart(part, k, int(n), t, stage) for stage, records in sorted(by_stage.items())
            for k, (n, t) in _grouped(records, keep).items()]


def _device_rows(pricer: Any, batch: int, context: int) -> list[StepPart]:
    """The step's device parts: token-wise work at the padded batch (every stage's, and what the step's
    composition of the stages adds to their records), the LM head (the last stage's), sampler and attention."""
    from simulator.engines.analytical import evaluate
    from workloads.serving import sampler_graph

    def lm_head(r: Any) -> bool:
        return r.name.startswith("lm_head")

    dense = pricer.prefill_step(pricer.padded(batch), 1)
    rows = _stage_rows("token-wise", dense, lambda r: r.kind != "attention" and not lm_head(r))
    if pricer.plan.pp > 1:  # the step is the stages in turn (IterationPricer._parts: the plan's latency)
        summed = sum(float(r.time_s) for rep in dense.reports for r in rep.records)
        rows.append(StepPart("token-wise", "stage composition", 0, float(dense.latency_s) - summed,
                             pricer.plan.pp - 1))
    rows += _stage_rows("lm head", pricer.prefill_step(batch, 1), lm_head)
    last = pricer.plan.pp - 1
    if pricer.sampler:
        rep = evaluate(sampler_graph(pricer.cfg, n=batch, kernels=pricer.sampler, dtype=pricer.dtype),
                       pricer.device, _no_fusion(pricer.options))
        rows += [StepPart("sampler", r.name, int(r.kernels or 0), float(r.time_s), last) for r in rep.records]
    rows.append(StepPart("attention", "attention", pricer.cfg.layers * len(pricer.windows),
                         pricer.attention(batch, 1, context)[0]))
    return rows


def _no_fusion(options: Any) -> Any:
    from dataclasses import replace

    return replace(options, fusion=False)


def decode_step_listing(pricer: Any, batch: int, context: int) -> list[StepPart]:
    """The parts of a decode-only step of ``batch`` sequences (a bucket point, at most the largest captured graph)
    at mean ``context`` as ``pricer`` prices it: device parts (one device's kernels; the step's latency where the
    plan has several stages) and the host parts serial with the step (the profile's host line, the sampler
    call's host time, the graph launch, the eager ops and synchronisations around the replay)."""
    from simulator.serving.config import ServingError
    from simulator.serving.iteration import bucket, bucket_bounds, sampler_call_host_s

    why = ("below 1" if batch < 1 else "between bucket points {} and {}".format(*bucket_bounds(batch)) if bucket(batch) != batch
           else f"above the largest captured graph ({pricer.graph_sizes[-1]})" if pricer.eager_decode(batch)
           else "")
    if why:
        raise ServingError(f"decode_step_listing: batch: got {batch}, {why}; expected a bucket point (1..16, then "
                           "m * 2^e, m = 8..15) no larger than the largest captured graph")
    rows = _device_rows(pricer, batch, context)
    rows.append(StepPart("input broadcast", "broadcast", pricer.step_broadcasts if pricer.plan.tp > 1 else 0,
                         pricer.step_broadcast_time(batch)))
    graphed = pricer.replays_graph(batch)
    rows += [StepPart("host", "profile host line", 0, pricer.host_s + pricer.host_per_seq_s * batch),
             StepPart("host", "sampler call", 0, sampler_call_host_s(pricer.sampler_host, batch)),
             StepPart("host", "graph launch", 0, pricer.graph_launch_time() if graphed else 0.0),
             StepPart("host", "eager ops and syncs around the replay", pricer.decode_host[0],
                      pricer.decode_host_time() if graphed else 0.0)]
    return rows

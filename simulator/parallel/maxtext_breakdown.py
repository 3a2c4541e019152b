"""Where a predicted MaxText step goes, per row of the training dataset (a diagnostic of the TPU rows).

:func:`maxtext_step_breakdown` predicts a MaxText row exactly as ``validate --dataset training`` does
(:mod:`simulator.parallel.training_validation`) and splits the step: the device's op time by class (GEMMs on
the MXUs, attention kernels, every other op: vector-unit fusions bounded by HBM), the FSDP all-gathers and
gradient reductions of the step (all of them, hidden or not) and what of them is exposed, the exposed host
offload; and the measured step (for an MFU row, MaxText's own FLOP count over the MFU and the peak,
:mod:`simulator.parallel.maxtext_flops`). ``benchmarks/bench_maxtext_breakdown.py`` prints it.

:func:`precision_pair_split` reads two measured steps of one workload whose GEMMs run at different rates (the
bf16 and AQT int8 GPT-3 175B rows on v6e-256) as a factor on the predicted GEMM time and a time both steps lack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PairSplit", "SliceLoss", "StepBreakdown", "maxtext_step_breakdown", "precision_pair_split", "slice_loss"]

_GEMMS = ("matmul", "grouped_matmul", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight")
_ATTENTION = ("attention", "attention_bwd")
_COMM = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


@dataclass(frozen=True)
class StepBreakdown:
    """One MaxText row's predicted step (seconds; ``*_s`` per device and step)."""

    row_id: str
    system: str
    tokens_per_chip: float
    measured_step_s: float | None
    predicted_step_s: float
    compute_s: float
    gemm_s: float
    attention_s: float
    other_s: float
    tp_comm_s: float
    fsdp_gather_s: float
    grad_reduce_s: float
    exposed_s: float
    offload_exposed_s: float
    #: the recomputed forward ops' share of ``compute_s`` (ops the rematerialisation repeats in the backward)
    recompute_s: float = 0.0
    #: the plan's optimizer update of the chip's parameter shard (after the backward, not in ``compute_s``)
    optimizer_s: float = 0.0
    #: the part of ``grad_reduce_s`` / ``exposed_s`` that all-reduces the gradient shards across replicated
    #: FSDP groups (several slices: the data-centre network); zero on one slice
    replicas_reduce_s: float = 0.0
    replicas_exposed_s: float = 0.0
    #: what the hidden FSDP collectives cost the compute beside them: their HBM traffic slowing the memory-bound
    #: ops (``fsdp_hbm_contention_s``) and the reduce-scatters' additions on the vector unit (``fsdp_vpu_reduce_s``)
    hbm_contention_s: float = 0.0
    vpu_reduce_s: float = 0.0

    @property
    def step_error(self) -> float | None:
        """Predicted over measured step, minus 1 (negative: predicted too fast)."""
        return self.predicted_step_s / self.measured_step_s - 1.0 if self.measured_step_s else None

    @property
    def beyond_collectives_s(self) -> float | None:
        """Measured step time the prediction lacks even with every FSDP all-gather and gradient reduction of
        the step counted serial with compute: measured - predicted - (the collectives' hidden part); None
        without a measured step. Positive: a cost that no collective of the step, run alone, accounts for."""
        if not self.measured_step_s:
            return None
        hidden = self.fsdp_gather_s + self.grad_reduce_s - self.exposed_s
        return self.measured_step_s - self.predicted_step_s - hidden

    @property
    def fsdp_ratio(self) -> float:
        """Every FSDP collective of the step (all-gathers and gradient reductions) over the compute."""
        return (self.fsdp_gather_s + self.grad_reduce_s) / self.compute_s if self.compute_s else 0.0


@dataclass(frozen=True)
class PairSplit:
    """Two measured steps of one workload read as ``measured = predicted + (gemm_factor - 1) x GEMM time + common``.

    ``gemm_factor`` scales the predicted GEMM time of both steps (above 1: the GEMMs run slower than priced, as a
    lower sustained clock or a worse tile efficiency would make them); ``common_missing_s`` is the time both steps
    lack beyond it (collectives, attention, vector work, anything that does not scale with the GEMMs)."""

    gemm_factor: float
    common_missing_s: float


def precision_pair_split(a: StepBreakdown, b: StepBreakdown) -> PairSplit:
    """Solve ``M_i = P_i + (r - 1) G_i + U`` (``i = a, b``; ``M`` measured, ``P`` predicted step, ``G`` predicted GEMM
    time) for the GEMM factor ``r`` and the common missing time ``U``: two equations, two unknowns.

    Meant for two runs of one workload whose GEMMs differ in rate and little else (bf16 and AQT int8 matmuls):
    their difference in missing time is what a GEMM-proportional cost must explain. It assumes the other ops of
    both steps are priced alike (the int8 step's quantisation ops included) and the int8 GEMMs reach the same
    fraction of their peak as the bf16 ones. ``ValueError`` (naming the rows) without both measured steps or
    when the two GEMM times are equal (no split).

    >>> bd = lambda m, p, g: StepBreakdown("r", "s", 1.0, m, p, p, g, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    >>> precision_pair_split(bd(13.0, 10.0, 8.0), bd(8.5, 6.0, 4.0))  # r = 1 + (3.0 - 2.5) / 4.0
    PairSplit(gemm_factor=1.125, common_missing_s=2.0)
    """
    if a.measured_step_s is None or b.measured_step_s is None:
        raise ValueError(f"{a.row_id}, {b.row_id}: a pair split needs both measured steps; got "
                         f"{a.measured_step_s!r} and {b.measured_step_s!r}")
    if a.gemm_s == b.gemm_s:
        raise ValueError(f"{a.row_id}, {b.row_id}: equal predicted GEMM time ({a.gemm_s!r} s); expected two steps "
                         "whose GEMMs differ in rate (bf16 and int8)")
    miss_a = a.measured_step_s - a.predicted_step_s
    miss_b = b.measured_step_s - b.predicted_step_s
    r = 1.0 + (miss_a - miss_b) / (a.gemm_s - b.gemm_s)
    return PairSplit(gemm_factor=r, common_missing_s=miss_a - (r - 1.0) * a.gemm_s)


@dataclass(frozen=True)
class SliceLoss:
    """What a multi-slice MaxText row loses against the one-slice row of the same workload (seconds per step).

    ``loss_s`` is the measured step less the one-slice row's measured step (the same per-chip work: MaxText's
    v5e/v5p tables and the Gemma 3 workloads keep the per-device batch); ``dcn_reduce_s`` the predicted
    cross-slice gradient all-reduce of the step, all of it (hidden or not); ``dcn_bound_s`` the same all-reduce
    at a lower achieved DCN rate (``dcn_reduce_s`` times ``rate_ratio``, the fabric's achieved fraction over the
    lower one), a bound on what a bandwidth term of the data-centre network could cost if none of it overlapped.
    """

    row_id: str
    base_id: str
    slices: int
    layers: int
    loss_s: float
    dcn_reduce_s: float
    dcn_bound_s: float

    @property
    def per_layer_s(self) -> float:
        """``loss_s`` per scanned layer (one cross-slice reduction a layer)."""
        return self.loss_s / self.layers

    @property
    def unexplained_s(self) -> float:
        """``loss_s`` less ``dcn_bound_s``: what remains with every cross-slice all-reduce serial at the lower rate
        (negative: the bound overshoots, so the all-reduce cannot be serial at that rate)."""
        return self.loss_s - self.dcn_bound_s


def slice_loss(multi: StepBreakdown, one: StepBreakdown, slices: int, layers: int,
               rate_ratio: float = 1.0) -> SliceLoss:
    """:class:`SliceLoss` of the multi-slice breakdown ``multi`` against the one-slice breakdown ``one``.

    ``ValueError`` (naming the rows) without both measured steps, with ``one`` not on one slice (it has a
    cross-slice all-reduce), or with ``slices < 2``, ``layers < 1`` or ``rate_ratio < 1``.

    >>> bd = lambda i, m, r: StepBreakdown(i, "s", 1.0, m, 9.0, 9.0, 8.0, 0.5, 0.5, 0.0, 1.0, 0.5, 0.0, 0.0,
    ...                                    replicas_reduce_s=r)
    >>> x = slice_loss(bd("b", 11.0, 0.25), bd("a", 10.0, 0.0), 32, 32, rate_ratio=2.0)
    >>> (x.loss_s, x.dcn_bound_s, x.unexplained_s, x.per_layer_s)
    (1.0, 0.5, 0.5, 0.03125)
    """
    if multi.measured_step_s is None or one.measured_step_s is None:
        raise ValueError(f"{multi.row_id}, {one.row_id}: a slice loss needs both measured steps; got "
                         f"{multi.measured_step_s!r} and {one.measured_step_s!r}")
    if one.replicas_reduce_s:
        raise ValueError(f"{one.row_id}: a cross-slice all-reduce of {one.replicas_reduce_s!r} s; expected the "
                         "one-slice row of the workload")
    if slices < 2 or layers < 1 or rate_ratio < 1.0:
        raise ValueError(f"{multi.row_id}: slices={slices!r}, layers={layers!r}, rate_ratio={rate_ratio!r}; "
                         "expected slices >= 2, layers >= 1 and rate_ratio >= 1")
    return SliceLoss(row_id=multi.row_id, base_id=one.row_id, slices=int(slices), layers=int(layers),
                     loss_s=multi.measured_step_s - one.measured_step_s, dcn_reduce_s=multi.replicas_reduce_s,
                     dcn_bound_s=multi.replicas_reduce_s * rate_ratio)


def _measured_step(row: Any, res: Any) -> float | None:
    from simulator.parallel.maxtext_flops import maxtext_flop_version, maxtext_flops_per_device
    from workloads.zoo.transformer import zoo_config

    metric = row["metric"].strip()
    if metric == "step_time_s":
        return float(row.value)
    version = maxtext_flop_version(row["framework_version"])
    if metric != "mfu" or version is None:
        return None
    g = row.ints
    flops = maxtext_flops_per_device(zoo_config(row["model"]), batch=g["global_batch"] / g["n_devices"],
                                     seq=g["seq"], version=version)
    return flops / (float(row.value) / 100.0) / res.peak_flops_per_s


def maxtext_step_breakdown(row: Any) -> StepBreakdown:
    """The predicted step of MaxText row ``row`` (a :class:`~simulator.parallel.training_validation.TrainingRecord`)
    with its parts; a row the validation cannot predict raises ``ValueError`` naming it."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.training_validation import (
        _plan,
        _system_name,
        row_options,
        stated_recipe,
    )

    if not row["framework"].startswith("MaxText"):
        raise ValueError(f"{row.id}: framework {row['framework']!r}; expected a MaxText row")
    g = row.ints
    n = g["n_devices"]
    tp, pp, cp = (g.get(k) or 1 for k in ("tp", "pp", "cp"))
    system, why = _system_name(row, n)
    if not system:
        raise ValueError(f"{row.id}: {why}")
    recipe = stated_recipe(row)
    res = evaluate_plan(row["model"], load_hardware(system), _plan(row, n // (tp * pp * cp)),
                        row_options(row, recipe["framework"]), train=True, seq=g["seq"], dtype="bf16", **recipe)
    kinds: dict[str, float] = {}
    recompute = 0.0
    repeats = res.report_repeats or (res.plan.microbatches,) * len(res.reports)
    for rep, times in zip(res.reports, repeats, strict=True):
        for r in rep.records:
            if r.kind != "optimizer_update":  # the graph's unsharded update; the plan's is optimizer_s
                kinds[r.kind] = kinds.get(r.kind, 0.0) + r.time_s * times
                recompute += r.time_s * times if "@recompute" in r.name else 0.0
    gemm = sum(kinds.get(k, 0.0) for k in _GEMMS)
    attention = sum(kinds.get(k, 0.0) for k in _ATTENTION)
    comm = sum(kinds.get(k, 0.0) for k in _COMM)
    bd = res.breakdown
    return StepBreakdown(row_id=row.id, system=system, tokens_per_chip=res.tokens / res.plan.devices,
                         measured_step_s=_measured_step(row, res), predicted_step_s=res.latency_s,
                         compute_s=bd["compute_s"], gemm_s=gemm, attention_s=attention,
                         other_s=sum(kinds.values()) - gemm - attention - comm, tp_comm_s=comm,
                         fsdp_gather_s=bd.get("fsdp_gather_s", 0.0), grad_reduce_s=bd.get("dp_sync_s", 0.0),
                         exposed_s=bd.get("dp_sync_exposed_s", 0.0), offload_exposed_s=bd.get("offload_exposed_s", 0.0),
                         recompute_s=recompute, optimizer_s=bd.get("optimizer_s", 0.0),
                         replicas_reduce_s=bd.get("dp_sync_replicas_s", 0.0),
                         replicas_exposed_s=bd.get("dp_sync_replicas_exposed_s", 0.0),
                         hbm_contention_s=bd.get("fsdp_hbm_contention_s", 0.0),
                         vpu_reduce_s=bd.get("fsdp_vpu_reduce_s", 0.0))

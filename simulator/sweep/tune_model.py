"""The tuning problem of a model on catalog hardware: batch size, precision, fusion, activation
recomputation, parallel plan and device, with memory feasibility checked before evaluation.

A configuration is evaluated the way ``nodeperf predict`` evaluates it: the analytical engine on
the model's graph for one device, :func:`~simulator.parallel.compose.evaluate_plan` for a parallel
plan on a multi-device system, and :func:`~simulator.parallel.compose.generate_request` for a whole
LLM request (``phase="generate"``: TTFT, TPOT). The pre-check builds the same graphs without
costing them and applies :func:`simulator.report.memory.check_memory` (one device) or the
per-stage sum of :mod:`simulator.parallel.compose` (plans); it is exact for inference and a lower
bound for a training pipeline (whose stashed activations depend on the schedule).

Cost: ``cost_per_hour`` is the hourly price of one device (``hwmodels/catalog/prices.toml``, or a
file of the same format) times the devices the configuration occupies; ``cost_per_million_samples``
is that price over the time a million samples take at the predicted throughput (devices fully
used, no idle time); ``cost_per_million_tokens`` the same over the tokens ``tokens_per_s`` counts (LLMs)
and ``cost_per_step`` one training step's. A device-hour is priced by a :class:`hwmodels.cost.Pricing`
(:func:`hwmodels.cost.run_cost`, as ``nodeperf serve`` prices a run): the on-demand rent (``cloud``) or
the total cost of ownership (``tco``: the purchase amortised plus the electricity of the configuration's
own average power, its predicted energy over its devices and latency, at a PUE).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from hwmodels.cost import PRICES_FILE as _PRICES_FILE
from hwmodels.cost import Price, Pricing, load_prices
from simulator.sweep.tune import METRICS, Axis, SearchSpace, TuneError, _fit_reason

__all__ = ["ModelProblem", "Price", "load_prices", "PRICES_FILE", "DEFAULT_BATCHES", "DEFAULT_DTYPES", "parse_dtypes",
           "parse_weight_dtypes", "SHARDINGS"]

logger = logging.getLogger(__name__)

#: The catalog's price file (re-exported from :mod:`hwmodels.cost`, where prices are loaded).
PRICES_FILE = _PRICES_FILE
#: Batch sizes searched when none are given.
DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Precisions searched when none are given (tf32: fp32 storage on the TF32 tensor path).
DEFAULT_DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "int8")
_LLM_PHASES = ("prefill", "decode", "generate")


def parse_dtypes(values: Sequence[str], where: str = "--dtype") -> tuple[str, ...]:
    """Canonical dtype names (``fp8`` -> ``fp8_e4m3``), in order, without duplicates."""
    from workloads.dtypes import parse_dtype

    out: list[str] = []
    for v in values:
        d = parse_dtype(v, f"{where} {v!r}").value
        if d not in out:
            out.append(d)
    return tuple(out)


#: Activation dtypes a quantised-weight configuration runs with.
_QUANT_ACTIVATIONS = ("bf16", "fp16")


def parse_weight_dtypes(values: Sequence[str], where: str = "--weight-dtype") -> tuple[str, ...]:
    """Canonical weight precisions (``none``, ``int8``, ``int4``, ``fp8_e4m3``), in order, without duplicates."""
    from workloads.precision import parse_weight_dtype

    out: list[str] = []
    for v in values:
        d = "none" if str(v).strip().lower() in ("none", "16-bit", "bf16", "fp16", "") else \
            parse_weight_dtype(v, f"{where} {v!r}").value
        if d not in out:
            out.append(d)
    return tuple(out) or ("none",)


def _parse_kv(value: str | None) -> str | None:
    if value is None:
        return None
    from workloads.precision import parse_kv_dtype

    return parse_kv_dtype(value, "--kv-dtype").value


def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


#: A configuration's parallel degrees (absent axes are 1).
_DEGREES = ("tp", "pp", "dp", "ep", "cp")
#: Data-parallel sharding of a plan: name -> (ZeRO stage, PyTorch FSDP full sharding).
SHARDINGS: dict[str, tuple[int, bool]] = {"none": (0, False), "zero1": (1, False), "zero2": (2, False),
                                          "zero3": (3, False), "fsdp": (0, True)}


def _auto_ep(cfg: Any, most: int) -> tuple[int, ...]:
    """``--ep auto``: the divisors of the routed experts up to the largest system's devices (the expert-parallel ranks
    are data-parallel ones, :func:`workloads.parallel.plan_problems`); ``(1,)`` for a dense model."""
    return tuple(d for d in _divisors(int(cfg.experts or 1)) if d <= most)


def _auto_cp(cfg: Any, seq: int, most: int) -> tuple[int, ...]:
    """``--cp auto``: the divisors of the largest system's devices whose load-balanced chunks split the sequence
    (``seq`` a multiple of ``2 x cp``, :func:`workloads.parallel.plan_problems`); ``(1,)`` off decoder-only models."""
    if not cfg.is_decoder_lm:
        return (1,)
    return tuple(d for d in _divisors(most) if d == 1 or seq % (2 * d) == 0)


def _capacity_axis(values: Sequence[float | str], cfg: Any, where: str) -> Axis:
    """The ``capacity_factor`` axis of an MoE plan: ``none`` (dropless) and factors > 0 (tokens beyond
    ``factor x tokens x top_k / experts`` an expert are dropped, as ``predict --capacity-factor``)."""
    out: list[float | str] = []
    for v in values:
        f = "none" if str(v).strip().lower() == "none" else v
        if f != "none" and (isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < math.inf):
            raise TuneError(f"--capacity-factor: got {v!r}; expected none (dropless) or numbers > 0, e.g. none,1.25")
        if f not in out:
            out.append(f if f == "none" else float(f))
    if not out:
        raise TuneError("--capacity-factor: empty list; got none; expected none (dropless) or numbers > 0")
    if not cfg.experts:
        raise TuneError(f"--capacity-factor: {where} has no experts; got {','.join(map(str, out))}; expected no "
                        "--capacity-factor (a mixture-of-experts option)")
    return Axis("capacity_factor", tuple(out))


def _recompute_policies() -> tuple[str, ...]:
    from workloads.recompute import POLICIES

    return POLICIES


def _named_axis(name: str, values: Sequence[str], known: Sequence[str], flag: str, what: str) -> Axis:
    """An axis of names from ``known`` (in the order given, without duplicates); an unknown one is a located
    TuneError with the names and a near match."""
    vals = tuple(dict.fromkeys(str(v).strip() for v in values))
    if not vals:
        raise TuneError(f"{flag}: empty list; got none; expected one or more of {', '.join(known)}")
    bad = [v for v in vals if v not in known]
    if bad:
        from nodeperf.suggest import did_you_mean

        raise TuneError(f"{flag}: unknown {what} {bad[0]!r}; got {','.join(vals)}; expected one of {', '.join(known)}"
                        f"{did_you_mean(bad[0], list(known))}")
    return Axis(name, vals)


def _schedule_runs_axis(train: bool, values: Sequence[int]) -> Axis:
    """The ``pipeline_microbatches`` axis: microbatches of one pipeline schedule run (0: all in one run)."""
    if not train:
        raise TuneError("--pipeline-microbatches: schedule runs of a training step; got no --train; expected --train")
    out: list[int] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise TuneError(f"--pipeline-microbatches: got {v!r}; expected integers >= 0 (0: every microbatch in one "
                            "schedule run)")
        if v not in out:
            out.append(v)
    if not out:
        raise TuneError("--pipeline-microbatches: empty list; got none; expected at least one integer >= 0")
    return Axis("pipeline_microbatches", tuple(out), numeric=True)


def _recompute_axis(values: Sequence[str]) -> Axis:
    """The recompute axis: named policies (:data:`workloads.recompute.POLICIES`), MaxText custom policies
    ``custom:NAME=CHOICE,...`` and Megatron-Core's ``modules:NAME,...`` (checked as ``predict --recompute`` checks
    them)."""
    from workloads.recompute import check_policy

    vals = tuple(dict.fromkeys(str(v).strip() for v in values))
    custom = [v for v in vals if v.startswith(("custom:", "modules:"))]
    for v in custom:
        try:
            check_policy(v)
        except ValueError as exc:
            raise TuneError(f"--recompute: {exc}") from None
    rest = [v for v in vals if v not in custom]
    if rest or not custom:
        _named_axis("recompute", rest, _recompute_policies(), "--recompute", "policy")
    return Axis("recompute", vals)


def _policies_of(axes: Sequence[Axis]) -> tuple[str, ...]:
    return next(tuple(str(v) for v in a.values) for a in axes if a.name == "recompute")


def _check_stack_recipes(recipes: Sequence[str], frameworks: Sequence[str]) -> None:
    """Refuse a ``--fp8-linears`` recipe that none of the searched ``--framework`` stacks runs (its configurations
    would all be skipped): one located line naming the first stack's recipes, as ``predict --fp8-linears`` does."""
    from workloads.frameworks import get_profile
    from workloads.precision import fp8_stack_problem, stack_runs_recipe

    stacks = [get_profile(str(f)).name for f in dict.fromkeys(frameworks)]
    for recipe in recipes:
        if not any(stack_runs_recipe(recipe, s) for s in stacks):
            more = f" (nor does --framework {', '.join(stacks[1:])})" if len(stacks) > 1 else ""
            raise TuneError(fp8_stack_problem(recipe, stacks[0], "--fp8-linears") + more)


def _check_stack_policies(policies: Sequence[str], frameworks: Sequence[str]) -> None:
    """Refuse a ``--recompute`` policy that none of the searched ``--framework`` stacks has (its configurations
    would all be skipped): one located line naming the stacks' policies, as ``predict --recompute`` does."""
    from workloads.frameworks import get_profile
    from workloads.recompute import check_stack_policy, stack_accepts

    stacks = [get_profile(str(f)).name for f in dict.fromkeys(frameworks)]
    for policy in policies:
        if not any(stack_accepts(policy, s) for s in stacks):
            try:
                check_stack_policy(policy, stacks[0])
            except ValueError as exc:
                more = f" (nor does --framework {', '.join(stacks[1:])})" if len(stacks) > 1 else ""
                raise TuneError(f"{exc}{more}") from None


class ModelProblem:
    """Tune ``model`` over hardware, batch, dtype, fusion, recomputation and (on systems) tp x pp x dp.

    Parameters
    ----------
    model
        Zoo name, micro-workload, ONNX or Hugging Face config path (as ``nodeperf predict`` takes).
    hardware
        Catalog device or system names (or TOML paths): the device choice.
    batch, dtypes, fusion, recompute
        Values of those axes (recompute only with ``train``). With a training plan ``batch`` is the plan's
        ``microbatch``: sequences per data-parallel rank and microbatch (``predict --microbatch``).
    phase, seq, context, train, optimizer, input_len, output_len
        The workload, as the ``predict`` flags of the same names (``phase="generate"`` needs
        ``input_len`` and ``output_len``).
    tp, pp, dp
        Plan degrees to search on multi-device systems (None: every divisor of the device count);
        a configuration exists when ``tp * pp * dp * cp`` divides its system's device count.
    ep, cp
        Expert- and context-parallel degrees to search (None: not searched, 1; ``"auto"``: every divisor of the
        routed experts up to the devices, every divisor of the devices whose ``2 x cp`` chunks split the
        sequence). Expert-parallel ranks are data-parallel ones, so ``ep`` adds no devices and must divide the
        experts and ``dp`` (``tp x dp`` with etp 1); context parallelism multiplies the devices and needs ``seq``
        to be a multiple of ``2 x cp`` (load-balanced chunks). A candidate breaking a rule is rejected with the
        rule (:func:`workloads.parallel.plan_problems`); ``ep > 1`` on a dense model is a TuneError.
    capacity_factor
        MoE plans: expert capacity factors to search (None: not searched, dropless); ``"none"`` is dropless.
    global_batch
        Training with a plan: sequences per step (default ``dp * batch``, one microbatch); a
        configuration exists when ``dp * batch`` divides it.
    fp8_linears, frameworks, sharding, interleave
        Training-recipe axes of plans (None: not searched): fp8 linears' scaling recipes
        (``none`` and :data:`workloads.precision.FP8_RECIPES`; a recipe exists on devices with fp8 tensor
        rates), training-stack profiles (:mod:`workloads.frameworks`; a profile exists on the devices it
        names), data-parallel sharding (:data:`SHARDINGS`: ``none``, ``zero1``..``zero3``, ``fsdp``; a
        sharded configuration exists with ``dp x cp > 1``) and virtual stages per device (1: the 1F1B schedule;
        more: the interleaved schedule, with ``pp > 1``).
    pipeline_microbatches
        Training with a plan: microbatches of one pipeline schedule run to search (0: every microbatch in one
        run; ``N`` exists with ``pp > 1`` and a proper divisor of the rank's ``global_batch / (dp x batch)``
        microbatches, so without ``global_batch`` only 0 does).
    sequence_parallel
        Megatron sequence parallelism in every plan with ``tp > 1``.
    fill
        None: a plan's ``tp * pp * dp`` divides its system's device count. A share in (0, 1]: a plan
        may leave devices idle; it exists when it occupies between ``fill`` of the devices and all of them
        (the pipeline degree of a 126-layer model is no power of two, the devices of a cluster are).
    prices
        Price entries (:func:`load_prices`, or :func:`hwmodels.cost.load_price_entries` for ``tco``); devices
        without the price ``pricing`` needs (``usd_per_hour``; ``purchase_usd`` for ``tco``) have no cost metrics.
    pricing
        How a device-hour is priced (:class:`hwmodels.cost.Pricing`; default the on-demand rent).
    """

    lower_bound_metrics = frozenset({"memory_per_device"})

    def __init__(self, model: str, hardware: Sequence[str], *, batch: Sequence[int] = DEFAULT_BATCHES,
                 dtypes: Sequence[str] = DEFAULT_DTYPES, fusion: Sequence[bool] = (False, True),
                 recompute: Sequence[str] | None = None, phase: str | None = None, seq: int | None = None,
                 context: int | None = None, train: bool = False, optimizer: str = "adamw",
                 input_len: int | None = None, output_len: int | None = None,
                 tp: Sequence[int] | None = None, pp: Sequence[int] | None = None, dp: Sequence[int] | None = None,
                 global_batch: int | None = None, prices: Mapping[str, Price] | None = None,
                 calibration: str | None = None, weight_dtypes: Sequence[str] = ("none",),
                 kv_dtype: str | None = None, fp8_linears: Sequence[str] | None = None,
                 frameworks: Sequence[str] | None = None, sharding: Sequence[str] | None = None,
                 interleave: Sequence[int] | None = None, sequence_parallel: bool = False,
                 fill: float | None = None, pipeline_microbatches: Sequence[int] | None = None,
                 ep: Sequence[int] | str | None = None, cp: Sequence[int] | str | None = None,
                 capacity_factor: Sequence[float | str] | None = None, pricing: Any = None) -> None:
        from hwmodels.spec import SystemSpec
        from simulator.hardware import device_of, load_hardware

        self.model = model
        self.phase, self.seq, self.context, self.train = phase, seq, context, train
        self.optimizer, self.input_len, self.output_len = optimizer, input_len, output_len
        self.global_batch = global_batch
        if not hardware:
            raise TuneError("--hardware: empty device list; got ''; expected one or more catalog names "
                            "(see `nodeperf hardware`)")
        names = [h.strip() for h in hardware]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise TuneError(f"--hardware: {dup[0]!r} listed twice; got {','.join(names)}; expected each device once")
        self.hw: dict[str, Any] = {}
        for n in names:
            try:
                self.hw[n] = load_hardware(n, calibration)
            except ValueError as exc:
                raise TuneError(f"--hardware {n!r}: {exc}") from None
        self.count = {n: int(getattr(h, "count", 1)) if isinstance(h, SystemSpec) else 1 for n, h in self.hw.items()}
        self.device = {n: device_of(h) for n, h in self.hw.items()}
        self._check_workload()
        if phase == "generate":
            if input_len is None or output_len is None:
                raise TuneError("--phase generate: --input-len and --output-len are needed; expected --input-len N "
                                "--output-len M")
            if train:
                raise TuneError("--phase generate conflicts with --train; expected one of them")
        elif input_len is not None or output_len is not None:
            raise TuneError(f"--input-len/--output-len: they describe a request; got --phase {phase}; "
                            "expected --phase generate")
        if recompute is not None and not train:
            raise TuneError("--recompute: activation recomputation is a training option; got no --train; "
                            "expected --train")
        if global_batch is not None and not train:
            raise TuneError("--global-batch: a training option; got no --train; expected --train")
        axes = [Axis("hardware", tuple(names))]
        axes.append(Axis("batch", tuple(self._positive("--batch", batch)), numeric=True))
        axes.append(Axis("dtype", parse_dtypes(dtypes)))
        self.weight_dtypes = parse_weight_dtypes(weight_dtypes)
        self.kv_dtype = _parse_kv(kv_dtype)
        if self.weight_dtypes != ("none",):
            axes.append(Axis("weight_dtype", self.weight_dtypes))
        axes.append(Axis("fusion", tuple(dict.fromkeys(bool(f) for f in fusion))))
        if train:
            axes.append(_recompute_axis(recompute or ("none", "selective", "full")))
        axes += self._plan_axes(tp, pp, dp, (fp8_linears, frameworks, sharding, interleave, pipeline_microbatches),
                                (ep, cp, capacity_factor))
        self._check_frameworks_run(frameworks or ())
        if train and recompute is not None and frameworks:
            _check_stack_policies(_policies_of(axes), frameworks)
        if train and fp8_linears is not None and frameworks:
            _check_stack_recipes(next((tuple(str(v) for v in a.values) for a in axes if a.name == "fp8_linears"),
                                      ()), frameworks)
        if (self.weight_dtypes != ("none",) or self.kv_dtype) and train:
            raise TuneError("--weight-dtype/--kv-dtype: tune searches serving precision on inference steps only; got "
                            "--train; expected --phase prefill, decode, forward or generate")
        self.sequence_parallel = bool(sequence_parallel)
        if fill is not None and (isinstance(fill, bool) or not isinstance(fill, (int, float)) or not 0 < fill <= 1):
            raise TuneError(f"--fill: got {fill!r}; expected a share of the devices in (0, 1], e.g. 0.85")
        self.fill = None if fill is None else float(fill)
        self.space = SearchSpace(tuple(axes))
        self.prices = dict(prices or {})
        self.pricing = pricing or Pricing()
        metrics = {"latency_s", "throughput_per_s", "energy_j", "energy_per_sample_j", "power_w",
                   "memory_per_device", "capacity", "mfu", "devices"}
        eff_phase = self.effective_phase
        if eff_phase in _LLM_PHASES or (self.is_llm and train):
            metrics.add("tokens_per_s")
        if eff_phase in ("prefill", "generate"):
            metrics.add("ttft_s")
        if eff_phase in ("decode", "generate"):
            metrics.add("tpot_s")
        self.unpriced = sorted(n for n in names if not self._priced(self.device[n].name.lower()))
        if not self.unpriced:
            metrics |= {"cost_per_hour", "cost_per_million_samples"}
            metrics |= {"cost_per_million_tokens"} if "tokens_per_s" in metrics else set()
            metrics |= {"cost_per_step"} if train else set()
        self.metrics = frozenset(metrics)
        self._graphs: dict[tuple[Any, ...], Any] = {}

    def _plan_axes(self, tp: Sequence[int] | None, pp: Sequence[int] | None, dp: Sequence[int] | None,
                   recipe: tuple[Any, ...], ep_cp: tuple[Any, ...] = (None, None, None)) -> list[Axis]:
        """The plan's degrees (``ep`` and ``cp`` only when given, and its recipe axes) on a multi-device system
        running a transformer; sets ``plans``. Degrees or recipes asked for without such a system are a located
        TuneError."""
        most = max(self.count.values())
        self.plans = self.is_transformer and (most > 1 or self.phase == "generate")
        if most > 1 and self.is_transformer:
            axes = []
            for flag, vals in (("tp", tp), ("pp", pp), ("dp", dp)):
                chosen = tuple(self._positive(f"--{flag}", vals)) if vals else _divisors(most)
                axes.append(Axis(flag, chosen, numeric=True))
            return axes + self._expert_context_axes(*ep_cp, most=most) + self._recipe_axes(self.train, *recipe)
        if any(v is not None for v in recipe):
            raise TuneError("--fp8-linears/--framework/--sharding/--interleave/--pipeline-microbatches: training "
                            "recipes of parallel plans; "
                            "got no multi-device system running a transformer; expected a system such as dgx-h100 in "
                            "--hardware")
        if any(v for v in (tp, pp, dp, *ep_cp)):
            why = "the model is not a transformer the plans split" if most > 1 else \
                "no listed hardware has more than one device"
            raise TuneError(f"--tp/--pp/--dp/--ep/--cp/--capacity-factor: parallel plans need a multi-device system and a transformer; {why}; "
                            "expected a system such as dgx-h100 in --hardware")
        return []

    def _expert_context_axes(self, ep: Sequence[int] | str | None, cp: Sequence[int] | str | None,
                             capacity: Sequence[float | str] | None, most: int) -> list[Axis]:
        """The ``ep``, ``cp`` and ``capacity_factor`` axes asked for (``auto``: every legal degree, see
        :func:`_auto_ep` and :func:`_auto_cp`); ``ep > 1`` or a capacity factor on a model without experts is a
        located TuneError."""
        if ep is None and cp is None and capacity is None:
            return []
        from workloads.parallel import resolve_config

        cfg, defaults, where = resolve_config(self.model)
        seq = int(self.seq or defaults.get("seq", 2048))
        axes: list[Axis] = []
        if ep is not None:
            vals = _auto_ep(cfg, most) if ep == "auto" else tuple(self._positive("--ep", ep))
            if not cfg.experts and any(v > 1 for v in vals):
                raise TuneError(f"--ep: {where} has no experts; got {','.join(map(str, vals))}; expected 1 (expert "
                                "parallelism splits a mixture-of-experts model's routed experts)")
            axes.append(Axis("ep", vals, numeric=True))
        if cp is not None:
            axes.append(Axis("cp", _auto_cp(cfg, seq, most) if cp == "auto" else tuple(self._positive("--cp", cp)),
                             numeric=True))
        if capacity is not None:
            axes.append(_capacity_axis(capacity, cfg, where))
        return axes

    def _check_frameworks_run(self, frameworks: Sequence[str]) -> None:
        """Refuse a stack profile that runs on none of the searched devices (its configurations would all be
        skipped): one located line naming the devices and the profiles they run, as ``predict --framework`` does;
        and, for a training step, an inference engine (:data:`workloads.frameworks.INFERENCE_ONLY`), as ``predict
        --train`` refuses it."""
        from workloads.frameworks import (
            FrameworkError,
            check_profile_hardware,
            check_profile_trains,
            get_profile,
        )

        for name in dict.fromkeys(frameworks):
            profile = get_profile(str(name))
            if self.train:
                try:
                    check_profile_trains(profile)
                except FrameworkError as e:
                    raise TuneError(str(e)) from None
            if any(profile.applies_to(d.kind, d.vendor.lower()) for d in self.device.values()):
                continue
            try:
                check_profile_hardware(profile, next(iter(self.hw.values())), optional=False)
            except FrameworkError as exc:
                more = f" (nor on {', '.join(list(self.hw)[1:])})" if len(self.hw) > 1 else ""
                raise TuneError(f"{exc}{more}") from None

    def _recipe_axes(self, train: bool, fp8_linears: Sequence[str] | None, frameworks: Sequence[str] | None,
                     sharding: Sequence[str] | None, interleave: Sequence[int] | None,
                     pipeline_microbatches: Sequence[int] | None = None) -> list[Axis]:
        """The training-recipe axes asked for (each only when given, so other searches keep their axes)."""
        from workloads.frameworks import profile_names
        from workloads.precision import FP8_RECIPES

        axes: list[Axis] = []
        if fp8_linears is not None:
            if not train:
                raise TuneError("--fp8-linears: fp8 linears are a training recipe; got no --train; expected --train")
            axes.append(_named_axis("fp8_linears", fp8_linears, ("none", *FP8_RECIPES), "--fp8-linears", "recipe"))
        if frameworks is not None:
            axes.append(_named_axis("framework", frameworks, tuple(profile_names()), "--framework", "profile"))
        if sharding is not None:
            axes.append(_named_axis("sharding", sharding, tuple(SHARDINGS), "--sharding", "sharding"))
        if interleave is not None:
            if not train:
                raise TuneError("--interleave: virtual pipeline stages schedule a training step; got no --train; "
                                "expected --train")
            axes.append(Axis("interleave", tuple(self._positive("--interleave", interleave)), numeric=True))
        if pipeline_microbatches is not None:
            axes.append(_schedule_runs_axis(train, pipeline_microbatches))
        return axes

    # ----------------------------------------------------------------------------------- workload

    def _check_workload(self) -> None:
        """Resolve the model name once (a typo is a located error with near matches)."""
        name = self.model
        self.is_transformer = False
        self.is_llm = False
        self.default_phase: str | None = None
        if name.lower().endswith(".json"):
            self.is_transformer = self.is_llm = True
            self.default_phase = "prefill"
            return
        if ":" in name or name.lower().endswith(".onnx") or "/" in name:
            return
        from workloads.zoo import get_entry, load_data

        entry = get_entry(name)
        self.is_transformer = entry.name in load_data("transformers.toml").get("models", {})
        self.is_llm = "prefill" in entry.phases
        self.default_phase = str(entry.defaults.get("phase", "forward"))
        if self.phase == "generate" and not self.is_llm:
            raise TuneError(f"--phase generate: {entry.name} is not a decoder language model; expected a model "
                            "with prefill/decode phases")

    @property
    def effective_phase(self) -> str:
        return "train" if self.train else (self.phase or self.default_phase or "forward")

    @staticmethod
    def _positive(flag: str, values: Sequence[int]) -> list[int]:
        out: list[int] = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TuneError(f"{flag}: got {v!r}; expected positive integers")
            if v not in out:
                out.append(v)
        if not out:
            raise TuneError(f"{flag}: empty list; got none; expected at least one positive integer")
        return out

    def _plan(self, config: Mapping[str, Any]) -> Any:
        from workloads.parallel import ParallelPlan

        tp, pp, dp, ep, cp = (int(config.get(k, 1)) for k in _DEGREES)
        zero, fsdp = SHARDINGS[config.get("sharding", "none")]
        v = int(config.get("interleave", 1))
        cap = config.get("capacity_factor", "none")
        recipe: dict[str, Any] = dict(ep=ep, cp=cp, capacity_factor=None if cap == "none" else float(cap),
                                      zero_stage=zero, fsdp=fsdp,
                                      sequence_parallel=self.sequence_parallel and tp > 1)
        if v > 1:
            recipe.update(schedule="interleaved", interleave=v)
        if int(config.get("pipeline_microbatches", 0)):
            recipe.update(pipeline_microbatches=int(config["pipeline_microbatches"]))
        if self.train:
            gb = self.global_batch or dp * int(config["batch"])
            return ParallelPlan(tp=tp, pp=pp, dp=dp, microbatch=int(config["batch"]), global_batch=gb, **recipe)
        return ParallelPlan(tp=tp, pp=pp, dp=dp, **recipe)

    @staticmethod
    def _recipe(config: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of a configuration's fp8 recipe and stack (only those it sets, as
        :func:`~simulator.parallel.compose.evaluate_plan` passes them on)."""
        fp8 = config.get("fp8_linears", "none")
        return {k: v for k, v in (("fp8_linears", None if fp8 == "none" else fp8),
                                  ("framework", config.get("framework", ""))) if v}

    def _uses_plan(self, config: Mapping[str, Any]) -> bool:
        return (self.phase == "generate" or any(int(config.get(k, 1)) > 1 for k in _DEGREES)
                or config.get("capacity_factor", "none") != "none" or bool(self._recipe(config)))

    def _quant(self, config: Mapping[str, Any]) -> dict[str, str]:
        """The serving precision of a configuration as a plan's keyword arguments (``weight_dtype``, ``kv_dtype``)."""
        wd = config.get("weight_dtype", "none")
        return {k: str(v) for k, v in (("weight_dtype", None if wd == "none" else wd), ("kv_dtype", self.kv_dtype)) if v}

    def _graph(self, config: Mapping[str, Any]) -> Any:
        """The one-device graph of a configuration (cached: fusion and device do not change it)."""
        from workloads.resolve import load_workload

        wd = config.get("weight_dtype", "none")
        key = (config["batch"], config["dtype"], config.get("recompute", "none"), wd)
        g = self._graphs.get(key)
        if g is None:
            g = load_workload(self.model, batch=int(config["batch"]), seq=self.seq, phase=self.phase,
                              context=self.context, train=self.train, dtype=str(config["dtype"]),
                              optimizer=self.optimizer, recompute=str(config.get("recompute", "none")),
                              weight_dtype=None if wd == "none" else str(wd), kv_dtype=self.kv_dtype)
            if len(self._graphs) >= 64:
                self._graphs.pop(next(iter(self._graphs)))
            self._graphs[key] = g
        return g

    def _options(self, config: Mapping[str, Any]) -> Any:
        """The engine options of a configuration: its fusion and tf32, and with a ``framework`` that stack's
        costing as ``predict --framework`` applies it (:func:`workloads.frameworks.stack_settings`: attention
        kernel, eager dispatch, all-reduce kernel, fp8 scaling ...), the searched fusion winning."""
        from simulator.engines.options import options_from_settings

        settings = {"fusion": bool(config["fusion"]), "tf32": config["dtype"] == "tf32"}
        name = config.get("framework", "")
        if not name:
            return options_from_settings(settings, where="tune")
        from workloads.frameworks import compile_conv_layout, get_profile, stack_settings

        profile = get_profile(str(name))
        layout = compile_conv_layout("", str(getattr(self.device[config["hardware"]], "vendor", "") or "")) if profile.name == "compile" else ""
        settings.update(stack_settings(profile, fusion=bool(config["fusion"]), conv_layout=layout))
        return options_from_settings(settings, where="tune", fused_moe_configs=profile.fused_moe_configs)

    # ----------------------------------------------------------------------------------- protocol

    def valid(self, config: Mapping[str, Any]) -> bool:
        n = self._devices(config)
        if config.get("weight_dtype", "none") != "none" and config["dtype"] not in _QUANT_ACTIVATIONS:
            return False  # quantised weights run with 16-bit activations (W4A16, W8A16, W8A8 fp8 with bf16 I/O)
        if config.get("weight_dtype") == "fp4_e2m1" and config["dtype"] != "bf16":
            return False  # MXFP4 experts take bf16 activations (vLLM Mxfp4Config.get_supported_act_dtypes)
        if config.get("weight_dtype") == "fp8_e4m3" and "fp8_e4m3" not in self.device[config["hardware"]].compute.tensor_flops_per_s:
            return False  # W8A8 fp8 needs fp8 tensor cores
        if not self._recipe_valid(config):
            return False
        if self.train and self.global_batch and self.global_batch % (int(config.get("dp", 1)) * int(config["batch"])):
            return False  # the global batch is whole microbatches on every data-parallel rank
        count = self.count[config["hardware"]]
        if self.fill is not None:
            return self.fill * count <= n <= count
        return count % n == 0

    def _recipe_valid(self, config: Mapping[str, Any]) -> bool:
        """Whether a configuration's training recipe exists on its device and plan."""
        dev = self.device[config["hardware"]]
        recipe = config.get("fp8_linears", "none")
        if recipe != "none":
            from workloads.precision import BLACKWELL_ONLY

            rate = "int8" if recipe == "int8" else "fp8"
            if not any(k.startswith(rate) for k in dev.compute.tensor_flops_per_s):
                return False  # fp8 (int8) linears need fp8 (int8) tensor rates
            if recipe in BLACKWELL_ONLY and str(getattr(dev, "arch", "")) not in BLACKWELL_ONLY[recipe][0]:
                return False  # MXFP8 needs Blackwell tensor cores
        if config.get("framework"):
            from workloads.frameworks import get_profile

            if not get_profile(config["framework"]).applies_to(dev.kind, dev.vendor.lower()):
                return False
            from workloads.recompute import stack_accepts

            if self.train and not stack_accepts(str(config.get("recompute", "none")), get_profile(config["framework"]).name):
                return False  # a policy the stack does not have (MaxText's names under megatron-core, ...)
            from workloads.precision import stack_runs_recipe

            if not stack_runs_recipe(str(config.get("fp8_linears", "none")), config["framework"]):
                return False  # a recipe the stack does not run (torchao's tensorwise under megatron-core, ...)
        if config.get("sharding", "none") != "none" and int(config.get("dp", 1)) * int(config.get("cp", 1)) == 1:
            return False  # nothing to shard over (the dp x cp ranks): the same plan as sharding none
        if not self._schedule_runs_valid(config):
            return False
        return int(config.get("interleave", 1)) == 1 or int(config.get("pp", 1)) > 1

    def _schedule_runs_valid(self, config: Mapping[str, Any]) -> bool:
        """Whether a configuration's ``pipeline_microbatches`` runs the schedule more than once a step: pipeline
        stages and a proper divisor of the rank's microbatches (else it is the plan of one run, listed as 0)."""
        k = int(config.get("pipeline_microbatches", 0))
        if not k:
            return True
        m = (self.global_batch or 0) // (int(config.get("dp", 1)) * int(config["batch"]))
        return int(config.get("pp", 1)) > 1 and k < m and m % k == 0

    def _plan_memory(self, plan: Any, config: Mapping[str, Any], **kw: Any) -> float:
        """Worst device's resident bytes of ``plan`` (as :func:`evaluate_plan` sums them, without the
        training stash of microbatches in flight, buffers and allocator reserve: a lower bound for training).
        A training plan's sharding divides what it shards over the data-parallel ranks (ZeRO-1: optimizer
        state; ZeRO-2: and gradients; ZeRO-3 and FSDP: and parameters), the graphs' own bytes otherwise."""
        from simulator.parallel.compose import stage_graphs
        from workloads.analysis import peak_live_bytes
        from workloads.ir import Role

        graphs = stage_graphs(self.model, plan, dtype=str(config["dtype"]), train=self.train, optimizer=self.optimizer,
                             recompute=str(config.get("recompute", "none")),
                             batch=None if self.train else int(config["batch"]), **kw, **self._recipe(config),
                             **self._quant(config))
        shard = float(plan.shard_group or plan.dp * plan.cp) if self.train else 1.0
        zero = plan.zero if shard > 1 else 0
        div = {Role.WEIGHT: shard if zero >= 3 else 1.0, Role.GRADIENT: shard if zero >= 2 else 1.0,
               Role.OPTIMIZER_STATE: shard if zero >= 1 else 1.0, Role.KV_CACHE: 1.0}
        per_stage: dict[int, float] = {}
        work: dict[int, float] = {}
        for sg in graphs:
            g = sg.graph
            per_stage[sg.stage] = per_stage.get(sg.stage, 0.0) + sum(float(g.role_bytes(r)) / d for r, d in div.items())
            work[sg.stage] = max(work.get(sg.stage, 0.0), float(peak_live_bytes(g)))
        return max(per_stage[s] + work[s] for s in per_stage)

    def precheck(self, config: Mapping[str, Any]) -> tuple[dict[str, float], str]:
        """Memory per device (and capacity, devices, hourly cost) before any op is costed."""
        from simulator.report.memory import check_memory

        name = config["hardware"]
        dev = self.device[name]
        cap = float(dev.main_memory.usable)
        if self.phase == "generate":
            plan = self._plan(config)
            need = self._plan_memory(plan, config, phase="prefill", seq=self.input_len)
            if self.output_len and self.output_len > 1:
                need = max(need, self._plan_memory(plan, config, phase="decode",
                                                   context=self.input_len + self.output_len - 2))
        elif self._uses_plan(config):
            plan = self._plan(config)
            need = self._plan_memory(plan, config, phase=self.phase or "prefill", seq=self.seq, context=self.context)
        else:
            need = float(check_memory(self._graph(config), dev).required_bytes)
        pre = {"memory_per_device": need, "capacity": cap, "devices": float(self._devices(config))}
        if "cost_per_hour" in self.metrics and self.pricing.mode == "cloud":  # tco: the run's power, evaluated
            pre["cost_per_hour"] = self.prices[dev.name.lower()].usd_per_hour * pre["devices"]
        return pre, (_fit_reason(need, cap) if need > cap else "")

    def _devices(self, config: Mapping[str, Any]) -> int:
        """Devices a configuration occupies: ``tp x pp x dp x cp`` (expert-parallel ranks are data-parallel ones)."""
        return math.prod(int(config.get(k, 1)) for k in ("tp", "pp", "dp", "cp"))

    def plan_json(self, config: Mapping[str, Any]) -> dict[str, Any] | None:
        """The parallel plan of a configuration as ``predict --json`` states it (``tp`` .. ``cp``, ``microbatch``,
        ``global_batch``, ``microbatches``, ...), or None when it runs on one device or its plan cannot be built."""
        if not (self.plans and self._uses_plan(config)):
            return None
        try:
            return self._plan(config).to_json()
        except ValueError:
            return None

    def evaluate(self, config: Mapping[str, Any]) -> dict[str, float]:
        """Predict one configuration; metrics in SI units (see :data:`simulator.sweep.tune.METRICS`)."""
        hw = self.hw[config["hardware"]]
        opts = self._options(config)
        batch = int(config["batch"])
        devices = self._devices(config)
        phase = self.effective_phase
        out: dict[str, float] = {}
        if self.phase == "generate":
            from simulator.parallel.compose import generate_request

            plan = self._plan(config)
            res = generate_request(self.model, hw, plan, opts, input_len=self.input_len, output_len=self.output_len,
                                   batch=batch, dtype=str(config["dtype"]), **self._quant(config))
            # a serving stack's engine costs, as predict prices them
            from simulator.serving.served import served_generate

            res = served_generate(res, self.model, hw, plan, opts, config.get("framework") or None, batch=batch,
                                  input_len=self.input_len, output_len=self.output_len, dtype=str(config["dtype"]),
                                  **self._quant(config))
            lat = float(res.extra["e2e_latency_s"])
            energy = float(res.to_cost_report().totals.energy_j)
            samples = float(batch * plan.dp)
            out.update(ttft_s=float(res.extra["ttft_s"]), tpot_s=float(res.extra["tpot_s"]),
                       tokens_per_s=float(res.extra["output_tokens_per_s"]))
            mem, cap, mfu = res.memory_per_device_bytes, res.memory_capacity_bytes, res.mfu
        elif self._uses_plan(config):
            from simulator.parallel.compose import evaluate_plan

            plan = self._plan(config)
            res = evaluate_plan(self.model, hw, plan, opts, phase=self.phase, train=self.train, seq=self.seq,
                                context=self.context, dtype=str(config["dtype"]),
                                batch=None if self.train else batch, optimizer=self.optimizer,
                                recompute=str(config.get("recompute", "none")), **self._recipe(config),
                                **self._quant(config))
            lat = float(res.latency_s)
            energy = float(res.to_cost_report().totals.energy_j)
            samples = float(plan.global_batch or plan.dp * plan.microbatch) if self.train else float(batch * plan.dp)
            if "tokens_per_s" in self.metrics:
                out["tokens_per_s"] = float(res.tokens_per_s)
            mem, cap, mfu = res.memory_per_device_bytes, res.memory_capacity_bytes, res.mfu
        else:
            from simulator.engines.analytical import evaluate

            graph = self._graph(config)
            rep = evaluate(graph, hw, opts)
            lat = float(rep.totals.latency_s)
            energy = float(rep.totals.energy_j)
            samples = float(graph.meta.get("batch", batch))
            if "tokens_per_s" in self.metrics:
                per = 1 if phase == "decode" else int(graph.meta.get("seq", 1))
                out["tokens_per_s"] = samples * per / lat if lat > 0 else 0.0
            mem, cap, mfu = rep.memory.required_bytes, rep.memory.capacity_bytes, rep.totals.mfu
        if phase == "prefill" and "ttft_s" in self.metrics:
            out["ttft_s"] = lat
        if phase == "decode" and "tpot_s" in self.metrics:
            out["tpot_s"] = lat
        out.update(latency_s=lat, throughput_per_s=samples / lat if lat > 0 else 0.0, energy_j=energy,
                   energy_per_sample_j=energy / samples, power_w=energy / lat / devices if lat > 0 else 0.0,
                   memory_per_device=float(mem), capacity=float(cap), mfu=float(mfu), devices=float(devices))
        if "cost_per_hour" in self.metrics:
            out.update(self._cost_metrics(self.cost(config, out)))
        return {k: v for k, v in out.items() if k in METRICS}

    def _priced(self, device: str) -> bool:
        """Whether the price file gives ``device`` the price this problem's pricing needs."""
        entry = self.prices.get(device)
        if entry is None:
            return False
        return (entry.purchase_usd if self.pricing.mode == "tco" else entry.usd_per_hour) is not None

    def cost(self, config: Mapping[str, Any], metrics: Mapping[str, float]) -> dict[str, Any]:
        """The JSON ``cost`` object of an evaluated configuration (:func:`hwmodels.cost.run_cost`, as ``nodeperf
        serve``'s: ``mode``, ``inputs``, ``parts``, ``usd_per_device_hour``, ``usd_total`` of one step or
        request, ``usd_per_million_samples``; for ``tco`` the ``power_w`` charged, the configuration's own
        average power) with ``usd_per_million_tokens`` (LLMs) and ``usd_per_step`` (training)."""
        from hwmodels.cost import run_cost

        lat, devices = float(metrics["latency_s"]), int(metrics["devices"])
        samples = float(metrics["throughput_per_s"]) * lat
        c = run_cost(self.device[config["hardware"]].name.lower(), devices, lat, samples,
                     energy_j=float(metrics["energy_j"]), pricing=self.pricing, table=self.prices, per="samples")
        c["basis"] = "devices x latency_s x hourly price / samples of the step or request"
        if "power_from" in c and c["power_from"].startswith("run average"):
            c["power_from"] = "configuration average: energy_j / (devices x latency_s)"
        if "tokens_per_s" in metrics and metrics["tokens_per_s"] > 0:
            c["usd_per_million_tokens"] = c["usd_total"] / (float(metrics["tokens_per_s"]) * lat) * 1e6
        if self.train:
            c["usd_per_step"] = c["usd_total"]
        return c

    def _cost_metrics(self, c: Mapping[str, Any]) -> dict[str, float]:
        """The cost metrics of a :meth:`cost` object."""
        out = {"cost_per_hour": c["usd_per_device_hour"] * c["devices"],
               "cost_per_million_samples": c["usd_per_million_samples"]}
        if "usd_per_million_tokens" in c and "cost_per_million_tokens" in self.metrics:
            out["cost_per_million_tokens"] = c["usd_per_million_tokens"]
        if "usd_per_step" in c:
            out["cost_per_step"] = c["usd_per_step"]
        return out

    def require_cost(self, why: str) -> None:
        """Raise a located error when ``why`` (an objective or constraint) needs prices some devices lack."""
        if self.unpriced:
            missing = ", ".join(repr(self.device[n].name) for n in self.unpriced)
            need = "purchase_usd" if self.pricing.mode == "tco" else "usd_per_hour"
            priced = sorted(k for k in self.prices if self._priced(k))
            raise TuneError(f"{why}: no {'purchase' if need == 'purchase_usd' else 'hourly'} price for {missing} in "
                            f"{PRICES_FILE.name}; expected a [devices.<name>] {need} entry there or in --prices "
                            f"FILE.toml (priced: {', '.join(priced) or 'none'})")

"""Validation of training predictions against published runs of today's recipes, nothing fitted.

``hwmodels/measurements/published_training.csv`` holds training measurements (tokens/s per device,
step time, MFU, peak memory) of FSDP, 2D/3D, fp8 and MoE recipes on H100, H200, B200 and TPU
v5e/v5p/v6e, each row with its recipe as the source states it. This module reads the file (every
problem located: file:line, column, got, expected), maps each row onto a
:class:`~workloads.parallel.ParallelPlan` with the options today's flags have, evaluates it with
:func:`simulator.parallel.evaluate_plan` and reports errors per group (device family x recipe).

A row is **predicted** only when everything in its recipe can be stated: a zoo model, a catalog
system for the hardware as deployed, the parallel degrees, batch and sequence, and the rest as the
source states it (:func:`stated_recipe`, :func:`_plan`):

* the **stack** the source ran (:data:`STACK_OF`): torchtitan and NeMo AutoModel -> ``fsdp2``,
  MaxText -> ``maxtext`` (``maxtext-cf`` where the row's notes state that the run's XLA flags set continuation
  fusion of all-gathers, ``-sc`` where they offload the gradient reductions to the SparseCore,
  :func:`maxtext_profile`), Megatron-Bridge / NeMo -> ``megatron-core``; the plan is composed under
  that training stack and costed with its options (:func:`simulator.parallel.stacks.profile_options`,
  as ``nodeperf predict --framework`` does);
* the **recompute policy** as named (:data:`workloads.recompute.POLICIES`): ``none``/``selective``/
  ``full``, torchtitan's per-op SAC (``op-sac``) -> ``selective-op``, MaxText ``remat_policy`` NAME
  (``maxtext:NAME``) -> NAME, the ``*_offloaded`` policies with their own host offload, Megatron-Core's
  selective ``recompute_modules`` (``modules:NAME,...``) as named;
* **fp8 linears** by recipe (:data:`workloads.precision.FP8_RECIPES`): torchao Float8 ``tensorwise``
  and ``rowwise``, TE ``delayed``, TE current scaling (``te-current-scaling``) -> ``current``, TE MXFP8
  block scaling (``mxfp8``) -> ``mxfp8``, MaxText AQT int8 (``int8-aqt``) -> ``int8``;
* MaxText's ``remat_policy: custom`` (``maxtext:custom``) -> ``custom:NAME=offload,...`` with the tensors
  the ``offload`` column lists as offloaded (``activations offloaded to host: NAME, ...``), every other
  checkpoint name at its base.yml default (:func:`workloads.recompute.custom_choices`);
* **hybrid sharding**: ``fsdp`` below the data-parallel degree (FSDP within a slice or a node group,
  data parallelism across) is ``ParallelPlan.shard_group``; **MoE capacity factor** from the ``moe``
  column is ``ParallelPlan.capacity_factor``; MaxText's dense einsum dispatch (``sparse_matmul: false``,
  "einsum" in the ``moe`` column) is ``ParallelPlan.moe_dispatch = "einsum"``; experts sharded by FSDP
  (``ep`` 1 with FSDP) are what full sharding does to every parameter; Megatron-Bridge rows without a
  ``zero`` column run their recipes' distributed optimizer (:data:`DEFAULT_ZERO_OF_STACK`).

Rows whose recipe holds something no flag states yet are listed as **not statable yet**, with what
(:data:`NOT_STATABLE_YET` names each piece). They are never dropped and never approximated into the score.

Hardware as deployed: a row's ``board`` column names a board variant; the variants the catalog holds
map to their systems (:data:`BOARD_SYSTEMS`: torchtitan's H100 SXM 96 GB HBM2e boards at their 500 W
default limit are ``grand-teton-h100-96gb``); ``N`` devices of a catalog node are ``<node>x<N/8>``;
TPU runs over ``dcn_slices`` slices are ``tpu-<gen>-<slice>x<slices>`` (the slice named by chips or
by TensorCores as Google names it), so the data-parallel traffic between slices crosses the
data-centre network.

So that the size of the gap stays visible, such a row may also get a **nearest-recipe** figure:
the same run with every unstatable piece replaced by the closest statable one. Those figures are reported
apart, labelled as approximations, and are not a score.

Plan mapping: ``tp``/``pp``/``cp``/``ep`` as printed (empty: 1); the data-parallel degree is
``n_devices / (tp pp cp)``; ``fsdp`` (the shard degree) equal to it is full sharding
(``ParallelPlan.fsdp``), below it hybrid sharding (``shard_group``); ``vp`` > 1 is the interleaved
schedule. ``microbatch`` is the source's own count: a torchtitan local batch or a Megatron MBS is
sequences per data-parallel rank per microbatch; MaxText's ``per_device_batch_size`` is per chip and has no gradient accumulation, so its
microbatch is ``global_batch / dp``. Metrics: ``tokens_per_s_per_device`` (tokens / step / devices),
``step_time_s``, ``mfu`` (in %, model FLOPs over the dense bf16 peak, as
:attr:`~simulator.parallel.compose.ParallelResult.mfu`; a MaxText row's MFU is MaxText's own FLOP count at the
row's commit over the predicted step, :mod:`simulator.parallel.maxtext_flops`), ``tflops_per_device`` (model FLOP/s) and
``peak_memory_gib`` (the worst device's predicted bytes; a row whose unit says "peak reserved" is the caching
allocator's reserve, so its prediction is the allocator-reserved bytes, the CUDA context and NCCL's buffers left
out). A row of metric ``oom`` is a run its source says
ran out of device memory (its value: the device memory in GiB it exceeded, as the source or the board states it;
its prediction: the worst device's predicted GiB): its fits verdict is right when the plan is predicted *not* to
fit, every other row's when it is predicted to fit. ``oom`` rows enter no MAPE.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_TRAINING_DATASET", "DEFAULT_ZERO_OF_STACK", "TRAINING_COLUMNS", "TRAINING_METRICS", "NOT_STATABLE_YET", "BOARD_SYSTEMS",
           "TrainingRecord",
           "TrainingResult", "STACK_OF", "SEQUENCE_PARALLEL_STACKS", "stack_of", "maxtext_profile", "CF_FOR_ALL_GATHER_NOTE",
           "NO_COLLECTIVE_OVERLAP_NOTE", "SPARSECORE_REDUCTION_NOTES",
           "stated_recipe", "load_training_rows", "validate_training", "training_summary", "recipe_of", "family_of"]

DEFAULT_TRAINING_DATASET = (Path(__file__).resolve().parents[2] / "hwmodels" / "measurements"
                            / "published_training.csv")
TRAINING_COLUMNS = ("id", "category", "model", "system", "n_devices", "tp", "pp", "dp", "ep", "cp", "vp", "fsdp",
                    "zero", "microbatch", "global_batch", "seq", "recompute", "fp8", "offload", "dcn_slices",
                    "compile", "moe", "dtype", "framework", "framework_version", "catalog", "board", "metric",
                    "value", "unit", "source", "notes")
#: metric -> what the prediction compares with it
TRAINING_METRICS = {"tokens_per_s_per_device": "tokens per second per device",
                    "step_time_s": "seconds per training step",
                    "mfu": "model FLOPs utilisation, % of the dense bf16 peak",
                    "tflops_per_device": "model TFLOP/s per device",
                    "peak_memory_gib": "peak memory per device, GiB",
                    "oom": "the run ran out of device memory (value: the device memory it exceeded, GiB)"}
#: metrics that are no throughput figure: a measured peak, and a run that failed for memory
_NOT_THROUGHPUT = ("peak_memory_gib", "oom")
_INT_COLUMNS = ("n_devices", "tp", "pp", "dp", "ep", "cp", "vp", "fsdp", "zero", "microbatch", "global_batch", "seq",
                "dcn_slices")
#: the recipe pieces no flag states yet (a row holding one is listed, not predicted), and the
#: nearest statable stand-in used for the labelled nearest-recipe figure
NOT_STATABLE_YET = {
    "fp8": "fp8 recipes without a --fp8-linears recipe (none in the dataset since current, mxfp8 and int8): no "
           "nearest figure",
    "recompute": "a recompute policy --recompute does not state (MaxText's custom policy is stated as "
                 "custom:NAME=CHOICE,...): nearest qkv_proj_offloaded when the q/k/v projections are offloaded, "
                 "else full",
    "offload": "host offload of activations no policy states (an offload column custom:NAME=offload cannot "
               "read): nearest the nearest policy's offload",
    "dcn_slices": "several TPU slices with no catalog multi-slice system for them: no nearest figure",
    "moe": "MoE dispatch by dense one-hot einsums (MaxText sparse_matmul false): nearest the grouped-GEMM dispatch",
    "board": "board variant without a catalog entry: nearest the catalog board",
}
#: a row's ``board`` text (as the dataset states the deployed board) -> the catalog system of such nodes
BOARD_SYSTEMS = {"H100 SXM 96 GB HBM2e (2.4 TB/s), 500 W power limit": "grand-teton-h100-96gb"}
#: a row's ``recompute`` -> the policy (:data:`workloads.recompute.POLICIES`): torchtitan's per-op SAC
#: (``selective_ac_option = "op"``) is ``selective-op``; ``maxtext:NAME`` is MaxText's ``remat_policy`` NAME
_POLICY_OF = {"none": "none", "selective": "selective", "full": "full", "op-sac": "selective-op"}
#: a row's ``fp8`` -> the ``fp8_linears`` recipe (:data:`workloads.precision.FP8_RECIPES`)
#: (TE ``Float8CurrentScaling`` -> ``current``, TE ``MXFP8BlockScaling`` -> ``mxfp8``, MaxText AQT int8 -> ``int8``)
_FP8_OF = {"tensorwise": "tensorwise", "rowwise": "rowwise", "delayed": "delayed", "te-current-scaling": "current",
           "mxfp8": "mxfp8", "int8-aqt": "int8"}
_NEAREST_FP8: dict[str, str] = {}  # every recipe of the dataset is stated
#: stacks whose tensor parallelism always shards the activations between the tensor-parallel regions (bytes as
#: Megatron sequence parallelism, ``ParallelPlan.sequence_parallel``): torchtitan's ``apply_tp``
#: (torchtitan/parallelisms/parallelize_llama.py: ``attention_norm``/``ffn_norm`` ``SequenceParallel()``, ``wo``/``w2``
#: ``RowwiseParallel(output_layouts=Shard(1))``) and MaxText (MaxText/configs/base.yml ``logical_axis_rules``:
#: ``['activation_embed', 'tensor']``, the residual stream's embed dimension over the tensor axis)
SEQUENCE_PARALLEL_STACKS = ("torchtitan", "maxtext")
#: the source's training stack (a prefix of the row's ``framework``, lower case) -> the framework profile
STACK_OF = (("torchtitan", "fsdp2"), ("nemo automodel", "fsdp2"), ("maxtext", "maxtext"),
            ("megatron", "megatron-core"), ("nemo", "megatron-core"))
#: ZeRO stage of a stack's default optimizer when the row states none: Megatron-Bridge's pretraining recipes
#: build the optimizer with ``distributed_fused_adam_with_cosine_annealing`` (src/megatron/bridge/recipes/utils/
#: optimizer_utils.py: ``use_distributed_optimizer=True``) and ``DistributedDataParallelConfig(...,
#: use_distributed_optimizer=True)`` (recipes/llama/llama3.py, recipes/qwen/qwen3_moe.py at v0.2.0, the NeMo 25.11
#: release, and at 6ef21f8 and 270536cc; scripts/performance turns it off only for fine-tuning with PEFT):
#: Megatron-Core's distributed optimizer, fp32 master weights and Adam moments sharded over the data-parallel
#: group (ZeRO-1; Megatron-LM docs/source/api-guide/dist_optimizer.md). FSDP stacks shard everything already.
DEFAULT_ZERO_OF_STACK = {"megatron-core": 1}
#: Megatron-Bridge's performance recipes (NVIDIA-NeMo/Megatron-Bridge @ 6ef21f818de0991de5f0279199777a3f65880220,
#: the 25.11 rows' recipes, and @ 270536cce87462200e4bbcd5c92ac9a58e4340dd, the 26.04 rows'), what a row's columns
#: do not print but every run of these scripts sets:
#: * ``sequence_parallel`` True with tensor parallelism: src/megatron/bridge/recipes/llama/llama3.py
#:   ``llama3_70b_pretrain_config``/``llama31_405b_pretrain_config`` (``"sequence_parallel": True``) and
#:   recipes/qwen/qwen3_moe.py (``cfg.model.sequence_parallel = True``), which scripts/performance builds on and
#:   does not override (the 8B recipe sets False, its runs use tp 1);
#: * ``grad_reduce_in_fp32 = False`` (bf16 main gradients): ``set_llama3_common_configs``,
#:   ``set_llama31_common_configs``, ``set_qwen3_common_configs``, deepseek and gpt_oss ``*_llm_pretrain.py``
#:   under scripts/performance/configs/ (``cfg.mixed_precision.grad_reduce_in_fp32 = False``,
#:   ``cfg.ddp.grad_reduce_in_fp32 = False``) at both commits;
#: * fp8 parameters: scripts/performance/utils/precision.py ``get_precision_config`` builds ``fp8_cs`` from
#:   ``bf16_with_fp8_current_scaling_mixed`` and ``fp8_mx`` from ``bf16_with_mxfp8_mixed``
#:   (src/megatron/bridge/training/mixed_precision.py), both ``fp8_param_gather = True`` (``fp8_param`` follows it);
#: * ``NCCL_NVLS_ENABLE=0``: scripts/performance/utils/executors.py ``PERF_ENV_VARS`` ("Disable NVLink SHARP to save
#:   memory", line 43 @ 6ef21f8, ebca89360 and 270536cc; turned on only with ``--nccl_ub``): plan field ``nccl_nvls``.
MEGATRON_BRIDGE_PERF = "megatron-bridge"
_FAMILIES = (("b200", "B200"), ("h200", "H200"), ("h100", "H100"), ("v5e", "TPU v5e"), ("v5p", "TPU v5p"),
             ("v6e", "TPU v6e"), ("v4", "TPU v4"), ("a100", "A100"))


@dataclass(frozen=True)
class TrainingRecord:
    """One checked row of the dataset (integers parsed; empty columns are None or '')."""

    id: str
    where: str
    raw: dict[str, str]
    ints: dict[str, int | None]
    value: float

    def __getitem__(self, key: str) -> str:
        return self.raw[key]


@dataclass(frozen=True)
class TrainingResult:
    """A row's outcome: predicted (``predicted``), or not statable yet / skipped (``why``)."""

    id: str
    model: str
    family: str
    recipe: str
    metric: str
    measured: float
    status: str  # "predicted", "not statable yet" or "skipped"
    predicted: float | None = None
    fits: bool | None = None
    why: tuple[str, ...] = ()
    nearest: float | None = None
    nearest_fits: bool | None = None
    system: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def error_pct(self) -> float | None:
        """Signed error of the prediction, % of the measured value."""
        return None if self.predicted is None else 100.0 * (self.predicted / self.measured - 1.0)

    @property
    def nearest_error_pct(self) -> float | None:
        return None if self.nearest is None else 100.0 * (self.nearest / self.measured - 1.0)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "family": self.family, "recipe": self.recipe,
                "metric": self.metric, "measured": self.measured, "status": self.status, "system": self.system,
                "predicted": self.predicted, "error_pct": self.error_pct, "fits": self.fits, "why": list(self.why),
                "nearest": self.nearest, "nearest_error_pct": self.nearest_error_pct,
                "nearest_fits": self.nearest_fits}


def _error(message: str) -> Exception:
    from simulator.calibration.measurements import MeasurementError

    return MeasurementError(message)


def _check_row(r: dict[str, str], where: str, problems: list[str]) -> tuple[dict[str, int | None], float | None]:
    """Problems of one raw row (appended to ``problems``); its integers and value."""
    from nodeperf.suggest import did_you_mean

    ints: dict[str, int | None] = {}
    for col in _INT_COLUMNS:
        s = (r.get(col) or "").strip()
        if not s:
            ints[col] = None
        elif s.isdigit() and (int(s) >= 1 or col == "zero"):
            ints[col] = int(s)
        else:
            problems.append(f"{where}: {col}: not a positive integer; got {s!r}; expected a positive integer or empty")
    for col in ("model", "system", "metric", "unit", "framework"):
        if not (r.get(col) or "").strip():
            problems.append(f"{where}: {col}: empty value; got ''; expected a value")
    for col, what in (("source", "a citation (document, commit, table and row)"),
                      ("notes", "the recipe details and what is derived")):
        if not (r.get(col) or "").strip():
            problems.append(f"{where}: {col}: empty value; got ''; expected {what}")
    if (r.get("category") or "").strip() != "train":
        problems.append(f"{where}: category: got {r.get('category')!r}; expected 'train'")
    if ints.get("n_devices") is None and not any(p.startswith(f"{where}: n_devices") for p in problems):
        problems.append(f"{where}: n_devices: empty value; got ''; expected the number of devices in the run")
    metric = (r.get("metric") or "").strip()
    if metric and metric not in TRAINING_METRICS:
        problems.append(f"{where}: metric: unknown metric; got {metric!r}; expected one of "
                        f"{', '.join(TRAINING_METRICS)}{did_you_mean(metric, list(TRAINING_METRICS))}")
    text = (r.get("value") or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not (math.isfinite(value) and value > 0):
        problems.append(f"{where}: value: not a positive number; got {text!r}; expected the measured number")
        value = None
    if (r.get("compile") or "").strip() not in ("", "0", "1"):
        problems.append(f"{where}: compile: got {r['compile']!r}; expected 1, 0 or empty")
    return ints, value


def load_training_rows(path: str | Path | None = None) -> list[TrainingRecord]:
    """The checked rows of the training dataset; every problem is collected and raised once.

    Raises
    ------
    simulator.calibration.measurements.MeasurementError
        Lines ``<file>:<line>: <column>: <problem>; got <value>; expected <form>``: an unreadable
        file, missing header columns, a duplicate or empty id, a non-integer degree, an unknown
        metric, a non-positive value, an empty source or notes.
    """
    from nodeperf.files import read_csv_text
    from nodeperf.suggest import format_problems, short_text

    p = Path(path) if path is not None else DEFAULT_TRAINING_DATASET
    text = read_csv_text(p, what="a training measurements CSV", error=_error)
    reader = csv.DictReader(text.splitlines(keepends=True))
    header = list(reader.fieldnames or [])
    missing = [c for c in TRAINING_COLUMNS if c not in header]
    if missing:
        raise _error(f"{p}:1: header: missing columns; got {short_text(', '.join(header)) or 'none'}; expected also "
                     f"{', '.join(missing)}")
    problems: list[str] = []
    out: list[TrainingRecord] = []
    seen: set[str] = set()
    line = 1
    for r in _rows(reader, p):
        where = f"{p}:{line + 1}"
        line = reader.line_num
        n0 = len(problems)
        if None in r:  # more fields than the header
            problems.append(f"{where}: row: {len(header) + len(r[None])} fields; got more than the header's "
                            f"{len(header)}; expected {len(header)}")
            continue
        r = {k: (v or "") for k, v in r.items()}
        rid = r["id"].strip()
        if not rid or rid in seen:
            problems.append(f"{where}: id: {'duplicate' if rid else 'empty'} id; got {rid!r}; expected a unique id")
        seen.add(rid)
        ints, value = _check_row(r, where, problems)
        if len(problems) == n0 and value is not None:
            out.append(TrainingRecord(rid, where, r, ints, value))
    if problems:
        raise _error(format_problems(str(p), problems, "the training dataset"))
    return out


def _rows(reader: Any, p: Path) -> Any:
    """The reader's rows; a CSV syntax error (a stray quote) as one located line."""
    try:
        yield from reader
    except csv.Error as exc:
        raise _error(f"{p}:{reader.line_num}: row: not valid CSV; got {exc}; expected comma-separated fields, "
                     "quoted where they hold commas") from None


def family_of(row: TrainingRecord) -> str:
    """Device family of a row (H100, H200, B200, TPU v5e, ...), from its catalog name or hardware."""
    text = f"{row['catalog']} {row['system']} {row['board']}".lower()
    for key, name in _FAMILIES:
        if key in text:
            return name
    return "other"


def _is_moe(row: TrainingRecord) -> bool:
    if (row.ints.get("ep") or 1) > 1 or row["moe"].strip():
        return True
    from workloads.zoo.transformer import zoo_config

    try:
        return bool(zoo_config(row["model"]).experts)
    except (KeyError, ValueError):
        return False


def recipe_of(row: TrainingRecord) -> str:
    """Recipe group of a row: ``moe``, ``3d`` (pipeline), ``fsdp+tp``, ``tp``, ``fsdp`` or ``dp``, then ``+cp``
    with context parallelism and ``+fp8`` when the linear layers run in fp8 (or int8)."""
    g = row.ints
    fsdp = (g.get("fsdp") or 1) > 1
    if _is_moe(row):
        base = "moe"
    elif (g.get("pp") or 1) > 1:
        base = "3d"
    elif (g.get("tp") or 1) > 1:
        base = "fsdp+tp" if fsdp else "tp"
    else:
        base = "fsdp" if fsdp else "dp"
    if (g.get("cp") or 1) > 1:
        base = "cp" if base == "dp" else base + "+cp"
    return base + ("+fp8" if row["fp8"].strip() else "")


def _reason_key(why: str) -> str:
    """The class of a not-statable / skipped reason (names and numbers masked) for the summary counts."""
    if why.startswith(("model ", "no catalog")):
        return re.sub(r"'[^']*'", "'...'", re.sub(r"\d+ devices", "N devices", why))
    if why.startswith("nearest recipe"):
        tail = why.split("refused: " if "refused: " in why else "recipe: ", 1)[-1].split(";")[0].split(": ")[-1]
        return "nearest recipe not evaluated: " + re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'...'", tail))
    return why.split(":")[0]


def _policy(rc: str, offload: str = "") -> str | None:
    """The recompute policy a row's ``recompute`` names (None: no policy states it); MaxText's ``custom``
    with the tensors the ``offload`` column lists as offloaded (:func:`_custom_policy`)."""
    from workloads.recompute import MAXTEXT_SAVES

    if rc == "maxtext:custom":
        return _custom_policy(offload)
    if rc.startswith("maxtext:"):
        return rc.split(":", 1)[1] if rc.split(":", 1)[1] in MAXTEXT_SAVES else None
    if rc.startswith("modules:"):  # Megatron-Core's selective recompute_modules, as --recompute states them
        from workloads.recompute import check_policy

        try:
            return check_policy(rc)
        except ValueError:
            return None
    return _POLICY_OF.get(rc)


def _custom_policy(offload: str) -> str | None:
    """``custom:NAME=offload,...`` from an ``offload`` column ``activations offloaded to host: NAME, ...``
    (every other MaxText checkpoint name at its base.yml default); ``custom`` for an empty column; None when
    the column names a tensor the policy cannot state."""
    from workloads.recompute import custom_choices

    text = offload.strip()
    if not text:
        return "custom"
    head, _, names = text.partition(":")
    if head.strip() != "activations offloaded to host":
        return None
    policy = "custom:" + ",".join(f"{n.strip()}=offload" for n in names.split(",") if n.strip())
    try:
        custom_choices(policy)
    except ValueError:
        return None
    return policy


def _capacity_factor(row: TrainingRecord) -> float | None:
    """The MoE capacity factor the ``moe`` column states (None: dropless)."""
    m = re.search(r"capacity[_ ]factor\s*([0-9.]+)", row["moe"])
    return float(m.group(1)) if m else None


def _moe_dispatch(row: TrainingRecord) -> str:
    """The ``moe`` column's dispatch: MaxText's dense einsums (``einsum``), DeepEP's kernels (``deepep``: the
    recipe's ``dispatcher: deepep``), Megatron-Core's flex dispatcher with the HybridEP backend (``hybridep``:
    the recipe's ``moe_flex_dispatcher_backend hybridep``, or notes stating the recipe's "HybridEP flex dispatcher":
    train-144..147, whose ``moe_expert_rank_capacity_factor`` Megatron-Core accepts only with that backend), else the
    sparse gather/scatter with an all-to-all per (token, expert)."""
    text = row["moe"].lower()
    if "hybridep" in text or re.search(r"\bHybridEP flex dispatcher\b", row["notes"]):
        return "hybridep"
    return "einsum" if "einsum" in text else "deepep" if "deepep" in text else "sparse"


def _moe_host_sync(row: TrainingRecord) -> bool:
    """Whether a Megatron-Core or NeMo AutoModel row's dispatcher waits on the host for its token counts: every
    dropless one does (the ``alltoall`` dispatcher at core_v0.15.0 syncs ``before_ep_alltoall``; the flex
    dispatcher's HybridEP and DeepEP backends read the received counts on the host; AutoModel's DeepEP path calls
    ``Buffer.dispatch`` without ``num_worst_tokens``, 'the CPU will wait for GPU's signal to arrive', and hands
    the received counts to the grouped GEMM as a host list, components/moe/megatron/fused_a2a.py and
    experts.py @ cb97654; :mod:`simulator.parallel.host_sync`). Not a row whose notes state a full-iteration CUDA
    graph or a HybridEP rank capacity factor (train-144..147, :func:`_cuda_graph_config`): with
    ``moe_expert_rank_capacity_factor`` HybridEP's budget is fixed in ``setup_metadata`` ("else: num_permuted_tokens
    stays None; HybridEP sizes buffers dynamically (CPU sync in dispatch)") and the op fuser's grouped MLP keeps
    the counts on the device (``skip_routed_expert_padding``; token_dispatcher.py, experts.py @ NVIDIA/Megatron-LM
    6513e3e23), and a captured graph holds no host wait
    (:attr:`workloads.parallel.ParallelPlan.moe_host_sync` refuses the combination).

    >>> _moe_host_sync({"moe": "dropless", "framework": "Megatron-Bridge", "notes": "cuda_graph_impl full_iteration"})
    False
    """
    graphs = _cuda_graph_config(row)
    return "dropless" in row["moe"].lower() and not (graphs.get("cuda_graph") == "full_iteration"
                                                     or "moe_rank_capacity_factor" in graphs)


def _batch_p2p_sync(pp: int, vp: int) -> bool:
    """Whether a Megatron-Bridge row's pipeline synchronises the device after every stage exchange: with pipeline
    stages and no virtual ones ``CommOverlapConfig`` sets ``batch_p2p_comm = True`` (with virtual stages
    ``overlap_p2p_comm`` instead; src/megatron/bridge/training/comm_overlap.py @ v0.2.0 and @ 270536cce, the
    26.04 recipes), and Megatron-Core's ``_communicate`` then calls ``torch.cuda.synchronize()`` while
    ``batch_p2p_sync`` keeps its default True, which no recipe or performance script changes
    (megatron/core/pipeline_parallel/p2p_communication.py, model_parallel_config.py @ core_v0.14.0 to
    core_v0.18.0; :attr:`workloads.parallel.ParallelPlan.p2p_host_sync`).

    >>> _batch_p2p_sync(8, 1), _batch_p2p_sync(8, 2), _batch_p2p_sync(1, 1)
    (True, False, False)
    """
    return pp > 1 and vp <= 1


def _a2a_overlap(row: TrainingRecord) -> bool:
    """Whether the row's notes state that its recipe sets Megatron-Bridge's ``moe_a2a_overlap`` (Megatron-Core's
    ``overlap_moe_expert_parallel_comm``): ``moe_a2a_overlap True`` or ``moe_a2a_overlap=True`` as read from the
    recipe config the notes cite (train-064: QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG @ v0.2.0; train-066:
    DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 @ 270536cce), or Megatron-Core's own name,
    ``overlap_moe_expert_parallel_comm True`` (train-144..147: ``CommOverlapConfig`` in
    ``_enable_hybridep_full_iteration_mxfp8`` @ 9c0cd2575^)."""
    return re.search(r"(moe_a2a_overlap|overlap_moe_expert_parallel_comm)\s*(=\s*)?true", row["notes"],
                     re.IGNORECASE) is not None


#: What a Megatron-Bridge row's ``framework_version`` names of a Megatron-Core whose ``CheckpointWithoutOutput``
#: copies each recomputed output back into the released storage (``ParallelPlan.recompute_output_copy``): the NeMo
#: 25.09 container (Megatron-Bridge v0.1.0 line, megatron-core 0.14.0: core_v0.14.0, 23e00ed0), the 25.11 container
#: (Megatron-Bridge v0.2.0, 3rdparty/Megatron-LM 0d8e0714) and Megatron-LM 5455f0a0, all before f54403492e (#3649,
#: 2026-03-11, zero-copy storage sharing); the 26.04 container's 580d53a8 has the share
#: (megatron/core/tensor_parallel/random.py ``_recompute`` at each commit)
RECOMPUTE_COPY_VERSIONS = ("NeMo 25.09 container", "NeMo 25.11 container", "Megatron-LM 5455f0a0")


def _recompute_output_copy(row: TrainingRecord) -> bool:
    """Whether the row's stated stack copies its recomputed ``CheckpointWithoutOutput`` outputs back
    (:data:`RECOMPUTE_COPY_VERSIONS`); it costs something only under ``recompute`` ``modules:`` with ``layernorm``,
    ``moe_act`` or ``mla_up_proj``.

    >>> _recompute_output_copy({"framework_version": "NeMo 25.11 container"})
    True
    >>> _recompute_output_copy({"framework_version": "NeMo 26.04.01 container"})
    False
    """
    return any(v in row["framework_version"] for v in RECOMPUTE_COPY_VERSIONS)


def _cuda_graph_config(row: TrainingRecord) -> dict[str, Any]:
    """A Megatron-Bridge row's CUDA graphs and HybridEP rank capacity factor as its ``notes`` state them from the
    recipe: ``cuda_graph_impl full_iteration``, ``moe_expert_rank_capacity_factor F`` (train-144..147,
    ``_enable_hybridep_full_iteration_mxfp8``, src/megatron/bridge/perf_recipes/qwen/common.py @ 9c0cd2575^);
    ``cuda_graph_impl transformer_engine with cuda_graph_scope S, ...`` (or ``cuda_graph_impl="transformer_engine"
    with cuda_graph_scope ["S", ...]``: train-059, 066, 068, 142, 143), Transformer Engine's per-layer graphs of
    those scopes; nothing for another stack or where the notes state none.

    >>> _cuda_graph_config({"framework": "Megatron-Bridge", "notes":
    ...     "cuda_graph_impl full_iteration, moe_expert_rank_capacity_factor 1.5"})
    {'cuda_graph': 'full_iteration', 'moe_rank_capacity_factor': 1.5}
    >>> _cuda_graph_config({"framework": "Megatron-Bridge", "notes":
    ...     'cuda_graph_impl="transformer_engine" with cuda_graph_scope ["attn", "moe_router"].'})
    {'cuda_graph': 'transformer_engine', 'cuda_graph_scope': ('attn', 'moe_router')}
    """
    if not row["framework"].strip().lower().startswith(MEGATRON_BRIDGE_PERF):
        return {}
    out: dict[str, Any] = {}
    if re.search(r"\bcuda_graph_impl (full_iteration)\b", row["notes"]):
        out["cuda_graph"] = "full_iteration"
    te = re.search(r'\bcuda_graph_impl\s*=?\s*"?transformer_engine"? with cuda_graph_scope \[?([a-z_", ]+)',
                   row["notes"])
    if te:
        from workloads.parallel import CUDA_GRAPH_SCOPES

        names = tuple(x for x in re.split(r'[\s",]+', te.group(1)) if x)
        bad = [x for x in names if x not in CUDA_GRAPH_SCOPES]
        if bad or not names:
            raise _error(f"{getattr(row, 'where', '') or row['id']}: notes: cuda_graph_scope: got {', '.join(bad) or 'no scope'!r}; expected scope "
                         f"names of {', '.join(CUDA_GRAPH_SCOPES)}")
        out.update(cuda_graph="transformer_engine", cuda_graph_scope=names)
    m = re.search(r"\bmoe_expert_rank_capacity_factor ([0-9]+(?:\.[0-9]+)?)\b", row["notes"])
    if m:
        out["moe_rank_capacity_factor"] = float(m.group(1))
    return out


def _automodel(row: TrainingRecord) -> bool:
    return row["framework"].strip().lower().startswith("nemo automodel")


def _schedule_microbatches(row: TrainingRecord, mb: int) -> int:
    """The microbatches of one pipeline schedule run where the stack runs the schedule once per local batch:
    NeMo AutoModel's loops call ``schedule.step`` once per gradient-accumulation step on a local batch of
    ``step_scheduler.local_batch_size`` (recipes/llm/benchmark.py and train_ft.py ``_forward_backward_step``
    @ cb97654), split into ``pp_microbatch_size`` microbatches; the local batch is the ``LBS`` the row's
    performance table prints (its ``notes``). 0 (one schedule for the step) for other stacks or none printed."""
    import re

    found = re.search(r"\bLBS (\d+)\b", row["notes"]) if _automodel(row) else None
    return int(found.group(1)) // mb if found and int(found.group(1)) % mb == 0 else 0


def _moe_routing(row: TrainingRecord) -> str:
    """``round-robin`` where the ``moe`` column states NeMo AutoModel's fake balanced gate (``FakeBalancedGate``
    with its default ``fake_gate_noise`` 0: neighbouring experts per token), else ``uniform``."""
    return "round-robin" if "fake balanced gate" in row["moe"].lower() else "uniform"


def stack_of(row: TrainingRecord) -> str:
    """The framework profile of the row's training stack (torchtitan and NeMo AutoModel: ``fsdp2``,
    MaxText: ``maxtext``, Megatron-Bridge / NeMo: ``megatron-core``; '' for another stack)."""
    fw = row["framework"].strip().lower()
    return next((prof for prefix, prof in STACK_OF if fw.startswith(prefix)), "")


#: the fact a MaxText row's ``notes`` record when the run's XLA flags (the script's ``LIBTPU_INIT_ARGS`` or the
#: benchmark workload's ``xla_flags``, at the commit the row cites) include MaxText's ``CF_FOR_ALL_GATHER``
#: (benchmarks/xla_flags_library.py: ``--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true`` with the
#: asynchronous collective fusion, multiple-steps, compute/collective overlap and async all-gather flags)
CF_FOR_ALL_GATHER_NOTE = "XLA flags: continuation fusion of all-gathers set"


#: what a MaxText row's ``notes`` record when the run's XLA flags set no flag that overlaps a collective with compute
#: (no continuation fusion, no SparseCore offload, no ``DATA_PARALLEL_OVERLAP``): MaxText's performance guide
#: (docs/reference/benchmark_and_performance.md @ 50bafeb98, 'Communication overlaps and tuning') names those two
#: methods, each enabled by its flags, the second 'recommended for v5p and v6e'
NO_COLLECTIVE_OVERLAP_NOTE = "No collective-overlap flag:"


#: the flag groups, as a MaxText row's ``notes`` name them, that offload the gradient reductions to the SparseCore
#: (benchmarks/xla_flags_library.py; the DeepSeek-V3 v5p workload's group also offloads its reduce-scatters): a run
#: that sets one overlaps its reductions with compute, where XLA:TPU's defaults leave them serial
SPARSECORE_REDUCTION_NOTES = ("ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE", "ENABLE_SPARSECORE_OFFLOADING_FOR_RS_AG_AR")


def maxtext_profile(row: TrainingRecord) -> str:
    """The framework profile of a MaxText row. Every MaxText profile but ``maxtext-serial`` overlaps the FSDP
    all-gathers with compute, as XLA:TPU does by default (``xla_tpu_enable_async_collective_fusion`` true,
    ``_fuse_all_gather`` auto; a run that sets no collective flag, :data:`NO_COLLECTIVE_OVERLAP_NOTE`, runs the
    defaults); the gradient reductions run serial with compute unless the run offloads them to the SparseCore
    (:data:`SPARSECORE_REDUCTION_NOTES`; libtpu's defaults make no reduce-scatter or all-reduce asynchronous, and no
    row sets ``CF_FOR_ALL_REDUCE``). ``maxtext-cf`` adds continuation fusion of the sequence-parallel all-gathers
    exactly when the ``notes`` state that the run's flags set it (:data:`CF_FOR_ALL_GATHER_NOTE`); ``-sc`` the
    SparseCore reductions."""
    notes = row["notes"]
    sc = "-sc" if any(n in notes for n in SPARSECORE_REDUCTION_NOTES) else ""
    return ("maxtext-cf" if CF_FOR_ALL_GATHER_NOTE in notes else "maxtext") + sc


#: where a MaxText row's ``notes`` state the splash-attention settings of the run's workload (its ``tuning_params``
#: in benchmarks/maxtext_trillium_model_configs.py at the cited tag, the rest from that tag's configs/base.yml)
SPLASH_NOTE = "Splash attention (the same workload's tuning_params):"
#: the block-size settings, in the order of :attr:`simulator.engines.options.EvalOptions.splash_blocks`
SPLASH_SETTINGS = ("sa_block_q", "sa_block_kv", "sa_block_q_dkv", "sa_block_kv_dkv", "sa_block_q_dq", "sa_block_kv_dq")
_SPLASH_GROUP = re.compile(r"((?:sa_block_\w+)(?:(?:,| and) sa_block_\w+)*) (\d+)")


def maxtext_splash_options(row: TrainingRecord) -> dict[str, Any]:
    """The splash-attention block sizes and backward kernel a MaxText row's notes state (:data:`SPLASH_NOTE`), as
    :class:`~simulator.engines.options.EvalOptions` fields; empty where the notes state none (the lowering's
    MaxText defaults then apply). Statements read: ``names ... N`` (each named setting is N), ``the other
    sa_block_* N``, a key block set to its query block (MaxText 770fcf7d1's ``attentions.py``: ``block_kv =
    sa_block_q`` and likewise for dkv and dq), ``sa_use_fused_bwd_kernel True``; an unnamed setting is 512
    (``configs/base.yml``)."""
    from simulator.lowering.tpu import SPLASH_BLOCK

    notes = row["notes"]
    at = notes.find(SPLASH_NOTE)
    if at < 0:
        return {}
    text = notes[at + len(SPLASH_NOTE):].split("Flag groups")[0]
    sizes: dict[str, int] = {}
    for names, value in _SPLASH_GROUP.findall(text):
        sizes.update((name, int(value)) for name in re.findall(r"sa_block_\w+", names))
    if "each key block to its query block" in text:
        for q, kv in zip(SPLASH_SETTINGS[::2], SPLASH_SETTINGS[1::2], strict=True):
            sizes.setdefault(kv, sizes.get(q, SPLASH_BLOCK))
    other = re.search(r"the other sa_block_\* (\d+)", text)
    default = int(other.group(1)) if other else SPLASH_BLOCK
    return {"splash_blocks": tuple(sizes.get(name, default) for name in SPLASH_SETTINGS),
            "splash_fused_bwd": "sa_use_fused_bwd_kernel True" in text}


#: what a MaxText row's ``notes`` record when its workload sets ``use_iota_embed: True``
ONEHOT_EMBED_NOTE = "Embedding: use_iota_embed True"


def row_options(row: TrainingRecord, framework: str) -> Any:
    """The evaluation options of a row predicted under stack ``framework``: the stack's costing
    (:func:`~simulator.parallel.stacks.profile_options`) with what the row's notes state of its kernels
    (:func:`maxtext_splash_options`; the one-hot embedding, :data:`ONEHOT_EMBED_NOTE`); None without a stack."""
    from simulator.parallel.stacks import profile_options

    if not framework:
        return None
    return replace(profile_options(framework), **maxtext_splash_options(row),
                   embedding_onehot=ONEHOT_EMBED_NOTE in row["notes"], tpu_flash_2023=runs_flash_2023(row))


#: MaxText commits whose ``attention: flash`` on a TPU calls jax's 2023 Pallas ``flash_attention`` kernel
#: (``from jax.experimental.pallas.ops.tpu import flash_attention``, ``tpu_flash_attention`` in
#: MaxText/layers/attentions.py @ 76bd53b0f), not splash attention
FLASH_2023_COMMITS = ("76bd53b0f",)


def runs_flash_2023(row: TrainingRecord) -> bool:
    """Whether a MaxText row ran the 2023 Pallas flash kernel: its notes state ``attention flash`` and its
    framework version is one of :data:`FLASH_2023_COMMITS`."""
    return "attention flash" in row["notes"] and any(c in row["framework_version"] for c in FLASH_2023_COMMITS)


def _unstatable(row: TrainingRecord, dp: int | None, system: str) -> list[str]:
    """What in a row's recipe no flag states yet (empty: statable today)."""
    why = []
    fp8 = row["fp8"].strip()
    if fp8 and fp8 not in _FP8_OF:
        why.append(f"fp8: linear layers in {fp8!r}, a recipe --fp8-linears does not state")
    rc = row["recompute"].strip()
    policy = _policy(rc, row["offload"])
    if rc and policy is None:
        why.append(f"recompute: named policy {rc!r}")
    if row["offload"].strip() and not (policy in ("qkv_proj_offloaded", "minimal_offloaded")
                                       or (policy or "").startswith("custom:")):
        why.append(f"offload: {row['offload'].strip()}")
    if (row.ints.get("dcn_slices") or 1) > 1 and not system:
        why.append(f"dcn_slices: {row.ints['dcn_slices']} slices over DCN")
    if row["board"].strip() and row["board"].strip() not in BOARD_SYSTEMS:
        why.append(f"board: {row['board'].strip()}")
    return why


def _system_name(row: TrainingRecord, n: int) -> tuple[str, str]:
    """(catalog system for ``n`` devices of the row's catalog family, or '' and why not)."""
    from simulator.hardware import load_hardware

    cat = BOARD_SYSTEMS.get(row["board"].strip(), row["catalog"].strip())
    if not cat:
        return "", f"no catalog system for {row['system'].split(',')[0]!r}"
    slices = row.ints.get("dcn_slices") or 1
    if cat.startswith("tpu-"):
        per, tail = (n // slices, f"x{slices}") if slices > 1 and n % slices == 0 else (n, "")
        names = [f"{cat}-{per}{tail}", f"{cat}-{2 * per}{tail}"]  # the slice is named by chips or by TensorCores
    else:
        names = [cat if n == 8 else f"{cat}x{n // 8}"] if n % 8 == 0 else []
    for name in names:
        try:
            hw = load_hardware(name)
        except (KeyError, ValueError):
            continue
        if getattr(hw, "count", None) == n:
            return name, ""
    return "", f"no catalog system of {n} devices for {cat!r}"


def _plan(row: TrainingRecord, dp: int) -> Any:
    """The row's ParallelPlan: its degrees and batch, full or hybrid sharding (``fsdp`` below the
    data-parallel degree: ``shard_group``), the MoE capacity factor, sequence parallelism where the stack
    always shards activations over the tensor-parallel ranks (:data:`SEQUENCE_PARALLEL_STACKS`); Megatron-Bridge's
    performance recipes' sequence parallelism, bf16 gradients and fp8 parameters (:data:`MEGATRON_BRIDGE_PERF`)."""
    from workloads.parallel import ParallelPlan

    g = row.ints
    tp, pp, cp, ep, vp = (g.get(k) or 1 for k in ("tp", "pp", "cp", "ep", "vp"))
    gb = g.get("global_batch")
    mb = g.get("microbatch")
    if row["framework"].startswith("MaxText") and gb:
        mb = max(1, gb // dp)  # per-chip batch, no gradient accumulation: one microbatch per step
    shard = g.get("fsdp") or 1
    # FSDP2 stacks shard over the data-parallel and context-parallel ranks together, so "FSDP 1, CP 8"
    # is fully sharded over 8 ranks (torchtitan parallelize_llama.py @ 9dec370: fully_shard over the
    # ``dp_shard_cp`` mesh whenever dp_shard or cp is enabled)
    fsdp = shard > 1 or (cp > 1 and stack_of(row) == "fsdp2")
    bridge = row["framework"].strip().lower().startswith(MEGATRON_BRIDGE_PERF)
    sp = tp > 1 and (bridge or row["framework"].strip().lower().startswith(SEQUENCE_PARALLEL_STACKS))
    split = _pipeline_split(row) if pp > 1 else "even"
    if split == "torchtitan" and mb and mb % pp == 0:
        mb //= pp  # torchtitan splits the local batch into pipeline_parallel_microbatches (default: pp degree)
    return ParallelPlan(tp=tp, pp=pp, dp=dp, ep=ep, cp=cp, sequence_parallel=sp, microbatch=mb or 1, global_batch=gb,
                        schedule="interleaved" if vp > 1 else "1f1b", interleave=vp, fsdp=fsdp,
                        shard_group=shard if 1 < shard < dp else 0, zero_stage=_zero_stage(row),
                        capacity_factor=_capacity_factor(row), pipeline_split=split,
                        stage_layers=_megatron_layout(row, pp * vp) if pp > 1 else (),
                        etp=MEGATRON_BRIDGE_ETP if bridge and tp > 1 and ep > 1 else 0,
                        moe_dispatch=_moe_dispatch(row), moe_routing=_moe_routing(row),
                        moe_host_sync=(bridge or _automodel(row)) and _moe_host_sync(row),
                        p2p_host_sync=bridge and _batch_p2p_sync(pp, vp),
                        pipeline_microbatches=_schedule_microbatches(row, mb or 1) if pp > 1 else 0,
                        grad_sync_per_step=_automodel(row) and pp > 1, moe_a2a_overlap=bridge and _a2a_overlap(row),
                        grad_reduce_dtype="bf16" if bridge else "", fp8_param=bridge and bool(row["fp8"].strip()),
                        fsdp_fp8_all_gather=fsdp and _fsdp_fp8_all_gather(row), nccl_nvls=not bridge,
                        recompute_output_copy=bridge and _recompute_output_copy(row),
                        **(_maxtext_config(row) or _automodel_config(row)), **_cuda_graph_config(row))


#: what a row's ``notes`` state of torchao's FSDP2 fp8 all-gather: torchtitan's ``[float8]`` settings (or the
#: ``--float8.*`` flags of a printed command) ``enable_fsdp_float8_all_gather`` and
#: ``precompute_float8_dynamic_scale_for_fsdp``, both named and neither stated false
_FP8_ALL_GATHER_KEYS = ("enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp")


def _fsdp_fp8_all_gather(row: TrainingRecord) -> bool:
    """Whether the row's notes state FSDP2's fp8 all-gather with precomputed scales (:data:`_FP8_ALL_GATHER_KEYS`;
    ``ParallelPlan.fsdp_fp8_all_gather``): train-025..030 (train_configs/llama3_405b.toml @ torchtitan 9dec370)
    and train-049..052 (the printed command of the H200 benchmark). A key followed by ``= false`` or ``false``
    is not a statement of it."""
    notes = row["notes"]
    return all(re.search(rf"\b{k}\b(?!\s*(=\s*)?false)", notes) for k in _FP8_ALL_GATHER_KEYS)


def _automodel_config(row: TrainingRecord) -> dict[str, Any]:
    """A NeMo AutoModel row's parameter dtype: its benchmark recipes build the model with
    ``NeMoAutoModelForCausalLM.from_config`` and no ``torch_dtype``, which is ``"auto"`` -> ``torch.bfloat16``
    (nemo_automodel/_transformers/auto_model.py @ cb9765441e5127b8100879ca1f7ff5920f825887), so FSDP2 shards
    bf16 parameters and ``torch.optim.Adam`` keeps bf16 moments; experts left out of FSDP (``ep_shard`` 1)
    stay bf16 too."""
    return {"param_dtype": "bf16"} if _automodel(row) else {}


def _maxtext_config(row: TrainingRecord) -> dict[str, Any]:
    """A MaxText row's ``weight_dtype`` and ``num_vocab_tiling`` as its ``notes`` state them (read from the
    workload's tuning parameters at the row's commit): ``param_dtype`` ``bf16`` for ``weight_dtype
    bfloat16``, ``loss_chunks`` for ``num_vocab_tiling N``; nothing for another stack or the defaults."""
    if not row["framework"].startswith("MaxText"):
        return {}
    out: dict[str, Any] = {}
    if re.search(r"\bweight_dtype bfloat16\b", row["notes"]):
        out["param_dtype"] = "bf16"
    m = re.search(r"\bnum_vocab_tiling (\d+)", row["notes"])
    if m and int(m.group(1)) > 1:
        out["loss_chunks"] = int(m.group(1))
    return out


#: models whose Megatron-Bridge pretraining recipe counts the embedding and the loss as pipeline
#: layers (``account_for_embedding_in_pipeline_split``/``account_for_loss_in_pipeline_split`` True:
#: src/megatron/bridge/recipes/llama/llama3.py ``llama31_405b_pretrain_config`` and
#: src/megatron/bridge/recipes/qwen/qwen3_moe.py ``qwen3_235b_a22b_pretrain_config``, which the
#: scripts/performance configs build on; NVIDIA-NeMo/Megatron-Bridge @ 6ef21f818de0991de5f0279199777a3f65880220)
_MEGATRON_SPLIT_MODELS = ("llama-3.1-405b", "qwen3-235b-a22b")


#: Megatron-Bridge's performance recipes for MoE models set ``expert_tensor_parallel_size=1``
#: (scripts/performance/configs/qwen/qwen3_workload_base_configs.py, deepseek/deepseek_workload_base_configs.py
#: ``BASE_DEEPSEEK_V3_CONFIG``, gpt_oss/gpt_oss_workload_base_configs.py ``BASE_GPT_OSS_120B_CONFIG``, @ 6ef21f8 and
#: 270536cc): with TP the expert-parallel ranks come from tp x dp (``ParallelPlan.etp``)
MEGATRON_BRIDGE_ETP = 1


#: DeepSeek-V3's Megatron-Bridge pipeline layouts: decoder layers per (virtual) stage by pp x vp
#: (src/megatron/bridge/recipes/deepseek/deepseek_v3.py ``set_deepseek_v3_pipeline_model_parallel_layout``
#: @ 6ef21f818de0991de5f0279199777a3f65880220: (16, 1), (8, 2) and (4, 4) are ``[embedding + 4 decoder]``,
#: 14 x ``[4 decoder]``, ``[1 decoder + mtp + loss]``; scripts/performance/configs/deepseek/
#: deepseek_workload_base_configs.py @ 270536cce ``pp_layout="Et*4|(t*4|)*14tmL"`` for PP 8 x VP 2, the same
#: counts). The multi-token-prediction layer on the last stage is not in the zoo's graph.
_MEGATRON_LAYOUTS: dict[tuple[str, int], tuple[int, ...]] = {
    ("deepseek-v3", 16): (4,) * 15 + (1,),
    ("deepseek-v3", 4): (16, 16, 16, 13),
    ("deepseek-v3", 8): (8,) * 7 + (5,),
}


def _megatron_layout(row: TrainingRecord, chunks: int) -> tuple[int, ...]:
    """Decoder layers per pipeline chunk of a Megatron-Bridge recipe's own layout (:data:`_MEGATRON_LAYOUTS`);
    () where the recipe splits by rule (:func:`_pipeline_split`)."""
    if not row["framework"].strip().lower().startswith("megatron"):
        return ()
    return _MEGATRON_LAYOUTS.get((row["model"].strip(), chunks), ())


def _pipeline_split(row: TrainingRecord) -> str:
    """The row's stack's own split of the layers over the stages (:data:`workloads.parallel.PIPELINE_SPLITS`):
    torchtitan's generated split points (torchtitan/parallelisms/pipelining_utils.py ``generate_split_points``
    @ 9dec370, the benchmarks' commit), NeMo AutoModel's, the Megatron-Bridge recipe's, else even."""
    fw = row["framework"].strip().lower()
    if fw.startswith("torchtitan"):
        return "torchtitan"
    if fw.startswith("nemo automodel"):  # generate_hf_model_fqn_per_model_part @ cb97654 (the benchmark's commit)
        return "automodel"
    if fw.startswith("megatron") and row["model"].strip() in _MEGATRON_SPLIT_MODELS:
        return "megatron-embedding-loss"
    return "even"


def _zero_stage(row: TrainingRecord) -> int:
    """The row's ZeRO stage: its ``zero`` column, else its stack's default optimizer (:data:`DEFAULT_ZERO_OF_STACK`;
    0 under FSDP, which shards the states itself)."""
    zero = row.ints.get("zero")
    if zero is not None:
        return zero
    return 0 if (row.ints.get("fsdp") or 1) > 1 else DEFAULT_ZERO_OF_STACK.get(stack_of(row), 0)


def stated_recipe(row: TrainingRecord, *, nearest: bool = False) -> dict[str, Any]:
    """The :func:`~simulator.parallel.evaluate_plan` keyword arguments of the row's recipe:
    ``recompute``, ``fp8_linears`` and ``framework``; ``nearest``: each unstatable piece replaced by
    its nearest statable stand-in (:data:`NOT_STATABLE_YET`)."""
    rc = row["recompute"].strip()
    policy = _policy(rc, row["offload"])
    if policy is None:
        policy = "qkv_proj_offloaded" if "query_proj" in row["offload"] else "full"
    fp8 = row["fp8"].strip()
    fp8_linears = _FP8_OF.get(fp8) or (_NEAREST_FP8.get(fp8) if nearest else None)
    stack = stack_of(row)
    if stack == "maxtext":
        stack = maxtext_profile(row)
    if stack == "fsdp2" and row["compile"].strip() != "1" and "" < _torchtitan_date(row) < NATIVE_RMSNORM_SINCE:
        stack = "torchtitan-eager"  # the model code's RMSNorm and RoPE op by op
    elif stack == "fsdp2" and row["compile"].strip() != "1" and _automodel(row):
        stack = "automodel"  # AutoModel's own model code: TE's fused RoPE, no repeat_kv
    if stack == "fsdp2" and row["compile"].strip() == "1":
        stack = "fsdp2-compile"  # torchtitan --compile: every block under torch.compile, FSDP2 as before
        if _torchtitan_date(row) and _torchtitan_date(row) < LOSS_COMPILED_SINCE:
            stack = "fsdp2-compile-blocks"  # before the loss was compiled too
        elif _automodel(row):
            stack = "automodel-compile"  # AutoModel's own model code: TE's fused RoPE, no repeat_kv
    return {"recompute": policy, "fp8_linears": fp8_linears, "framework": stack}


#: torchtitan's RMSNorm is torch's ``nn.RMSNorm`` from this date (3b39d7ab0, PR #985); before it, its own Python
#: module (:data:`workloads.frameworks._TORCHTITAN_EAGER_MODEL`), run op by op without ``--compile``. Limit: eager
#: ``nn.RMSNorm`` is one kernel only with torch's fused CUDA ``rms_norm`` (pytorch/pytorch #153666); the rule does
#: not read the row's torch version (every eager torchtitan row is 9dec370, before both)
NATIVE_RMSNORM_SINCE = "2025-03-19"
#: torchtitan compiles its cross entropy loss under ``--compile`` from this date (bbb1b616e, PR #1033)
LOSS_COMPILED_SINCE = "2025-04-02"


def _torchtitan_date(row: TrainingRecord) -> str:
    """The date of the torchtitan commit a torchtitan row's ``framework_version`` states (``torchtitan 9dec370
    (2024-12-26), torch ...``); '' for another stack, or where the version gives torchtitan's commit no date
    (``torchtitan 820504e, torch 38410cf9 (2025-06-14)``: that date is torch's)."""
    import re

    if not row["framework"].strip().lower().startswith("torchtitan"):
        return ""
    m = re.search(r"\btorchtitan\s+[^\s,(]+\s*\((\d{4}-\d{2}-\d{2})\)", row["framework_version"], re.IGNORECASE)
    return m.group(1) if m else ""


def _metric(row: TrainingRecord, res: Any) -> float:
    m = row["metric"].strip()
    if m == "tokens_per_s_per_device":
        return res.tokens / res.latency_s / res.plan.devices
    if m == "step_time_s":
        return res.latency_s
    if m == "mfu":
        return 100.0 * _maxtext_mfu(row, res) if row["framework"].startswith("MaxText") else 100.0 * res.mfu
    if m == "tflops_per_device":
        return res.model_flops_per_s_per_device / 1e12
    if m == "peak_memory_gib" and "reserved" in row["unit"]:
        # the caching allocator's peak reserve (torchtitan logs ``memory_stats()["reserved_bytes.all.peak"]``): not
        # the CUDA context nor NCCL's buffers, which are allocated beside the allocator
        return res.allocator_reserved_per_device_bytes / 2**30
    return res.memory_per_device_bytes / 2**30


def _maxtext_mfu(row: TrainingRecord, res: Any) -> float:
    """The MFU MaxText prints for the predicted step: MaxText's own FLOP count at the row's commit
    (:func:`simulator.parallel.maxtext_flops.maxtext_flops_per_device`) over the predicted step time and the
    dense bf16 peak, as the row's figure is defined; the model's FLOP count where the version is not stated."""
    from simulator.parallel.maxtext_flops import maxtext_flop_version, maxtext_flops_per_device
    from workloads.zoo.transformer import zoo_config

    version = maxtext_flop_version(row["framework_version"])
    if version is None or not res.latency_s or not res.peak_flops_per_s:
        return float(res.mfu)
    g = row.ints
    flops = maxtext_flops_per_device(zoo_config(row["model"]), batch=g["global_batch"] / g["n_devices"],
                                     seq=g["seq"], version=version)
    return flops / res.latency_s / res.peak_flops_per_s


def _evaluate(row: TrainingRecord, system: str, dp: int, *, nearest: bool) -> tuple[float, bool]:
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan

    recipe = stated_recipe(row, nearest=nearest)
    opts = row_options(row, recipe["framework"])  # the stack's costing, as predict, and the row's kernels
    res = evaluate_plan(row["model"], load_hardware(system), _plan(row, dp), opts, train=True, seq=row.ints["seq"],
                        dtype="bf16", **recipe)
    return _metric(row, res), res.fits_in_memory


def _predict(row: TrainingRecord) -> TrainingResult:
    from workloads.zoo import get_entry

    base = TrainingResult(row.id, row["model"], family_of(row), recipe_of(row), row["metric"].strip(), row.value,
                          status="skipped")
    g = row.ints
    n = g["n_devices"]
    tp, pp, cp = (g.get(k) or 1 for k in ("tp", "pp", "cp"))
    dp = n // (tp * pp * cp) if n % (tp * pp * cp) == 0 else None
    hard: list[str] = []  # pieces that stop even the nearest-recipe figure
    try:
        get_entry(row["model"])
    except (KeyError, ValueError):
        hard.append(f"model {row['model']!r} is not in the zoo")
    slices = g.get("dcn_slices") or 1
    system, why_sys = _system_name(row, n)
    if why_sys and slices == 1:
        hard.append(why_sys)
    if dp is None:
        hard.append(f"n_devices {n} is not a multiple of tp x pp x cp = {tp * pp * cp}")
    missing = [k for k in ("global_batch", "seq") if g.get(k) is None]
    if g.get("microbatch") is None and not row["framework"].startswith("MaxText"):
        missing.append("microbatch")
    if missing:
        hard.append(f"{', '.join(missing)} not stated")
    if not row["recompute"].strip():
        hard.append("recomputation not stated")
    soft = _unstatable(row, dp, system)
    if hard:
        return replace(base, why=tuple(hard + soft), system=system)
    if soft:
        if not system:  # several slices whose chips no single catalog slice holds
            return replace(base, status="not statable yet", why=tuple([*soft, f"nearest recipe: {why_sys}"]))
        try:
            value, fits = _evaluate(row, system, dp, nearest=True)
        except (KeyError, ValueError) as exc:  # a plan the model refuses: no nearest figure
            return replace(base, status="not statable yet", why=tuple([*soft, f"nearest recipe refused: {exc}"]),
                           system=system)
        return replace(base, status="not statable yet", why=tuple(soft), nearest=value, nearest_fits=fits,
                       system=system)
    try:
        value, fits = _evaluate(row, system, dp, nearest=False)
    except (KeyError, ValueError) as exc:  # a plan the model refuses (e.g. stages of unequal layer counts)
        return replace(base, why=(f"plan refused: {exc}",), system=system)
    return replace(base, status="predicted", predicted=value, fits=fits, system=system)


def validate_training(path: str | Path | None = None, *, progress: bool | None = None) -> list[TrainingResult]:
    """Every row of the training dataset: predicted (nothing fitted), not statable yet (with what,
    and a labelled nearest-recipe figure where one exists) or skipped (model, system or batch missing)."""
    from simulator.calibration.predict import quiet_engine
    from simulator.report.progress import track

    rows = load_training_rows(path)
    with quiet_engine():  # a plan that does not fit is the row's fits verdict, not a warning per stage
        return [_predict(r) for r in track(rows, desc="training rows", unit="row", enabled=progress)]


def _stats(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """n, MAPE, bias (geometric-mean ratio - 1, %) and worst signed error of (predicted, measured) pairs."""
    if not pairs:
        return {"n": 0, "mape": None, "bias": None, "max_abs_error": None}
    errs = [100.0 * (p / m - 1.0) for p, m in pairs]
    return {"n": len(pairs), "mape": sum(abs(e) for e in errs) / len(errs),
            "bias": 100.0 * (math.exp(sum(math.log(p / m) for p, m in pairs) / len(pairs)) - 1.0),
            "max_abs_error": max(errs, key=abs)}


def _group(results: list[TrainingResult], *, nearest: bool) -> dict[str, Any]:
    """Per-metric and throughput (every non-memory metric) figures of one group."""
    def pair(r: TrainingResult) -> tuple[float, float] | None:
        v = r.nearest if nearest else r.predicted
        return None if v is None else (v, r.measured)

    out: dict[str, Any] = {"rows": len(results)}
    thr = [p for r in results if r.metric not in _NOT_THROUGHPUT and (p := pair(r))]
    out["throughput"] = _stats(thr)
    for m in TRAINING_METRICS:
        sel = [p for r in results if r.metric == m != "oom" and (p := pair(r))]
        if sel:
            out[m] = _stats(sel)
    verdicts = [(r.nearest_fits if nearest else r.fits, r.metric == "oom") for r in results]
    verdicts = [(v, oom) for v, oom in verdicts if v is not None]
    out["fits_right"] = sum(1 for v, oom in verdicts if v != oom)  # a run that failed for memory: right if no fit
    out["fits_total"] = len(verdicts)
    out["oom_right"] = sum(1 for v, oom in verdicts if oom and not v)
    out["oom_total"] = sum(1 for _, oom in verdicts if oom)
    return out


def training_summary(results: list[TrainingResult]) -> dict[str, Any]:
    """Counts, per-group figures of the predicted rows (the score), the labelled nearest-recipe
    figures of the rows not statable yet, the reasons and the worst rows."""
    pred = [r for r in results if r.status == "predicted"]
    near = [r for r in results if r.status == "not statable yet" and r.nearest is not None]
    out: dict[str, Any] = {"rows": len(results), "predicted": len(pred),
                           "not_statable_yet": sum(r.status == "not statable yet" for r in results),
                           "skipped": sum(r.status == "skipped" for r in results)}
    out["overall"] = _group(pred, nearest=False)
    keys = sorted({(r.family, r.recipe) for r in results})
    out["groups"] = {}
    for fam, rec in keys:
        sel = [r for r in results if (r.family, r.recipe) == (fam, rec)]
        g = _group([r for r in sel if r.status == "predicted"], nearest=False)
        g["nearest_recipe"] = _group([r for r in sel if r.status == "not statable yet" and r.nearest is not None],
                                     nearest=True)
        g["listed"] = {"predicted": sum(r.status == "predicted" for r in sel),
                       "not_statable_yet": sum(r.status == "not statable yet" for r in sel),
                       "skipped": sum(r.status == "skipped" for r in sel)}
        out["groups"][f"{fam} x {rec}"] = g
    out["nearest_recipe_overall"] = _group(near, nearest=True)
    reasons: dict[str, int] = {}
    for r in results:
        for w in r.why:
            key = _reason_key(w)
            reasons[key] = reasons.get(key, 0) + 1
    out["reasons"] = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    scored = [r for r in pred if r.metric != "oom"]
    out["worst"] = [r.to_json() for r in sorted(scored, key=lambda r: -abs(r.error_pct))[:5]]
    near_scored = [r for r in near if r.metric != "oom"]
    out["worst_nearest"] = [r.to_json() for r in sorted(near_scored, key=lambda r: -abs(r.nearest_error_pct))[:5]]
    out["oom_rows"] = [r.to_json() for r in results if r.metric == "oom"]
    return out

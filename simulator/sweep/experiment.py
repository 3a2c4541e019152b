"""Experiment files: read a sweep's TOML (axes, base settings, filters, metrics), validate it, list its points.

An experiment names a base workload, hardware and options, then *axes*: lists, linear ranges,
log ranges or powers of two over workload parameters, spec fields (by dotted path), evaluation
options, or systolic-array geometry. The points are the product of the axes (or a zip of some of
them), minus those a filter rejects. Every problem of a file is found before anything runs and
reported at once, each line located as ``<file>:<line>: <key>: <problem>; got ...; expected ...``.

The schema is documented in ``docs/sweep.md``; a minimal file::

    schema = "nodeperf.experiment/1"
    name = "hbm-what-if"
    metrics = ["latency_s", "energy_j"]

    [workload]
    model = "llama-2-7b"
    phase = "decode"

    [hardware]
    name = "h100-sxm5-80gb"

    [axes.workload]
    batch = {pow2 = [1, 64]}

    [axes.hardware]
    memory.hbm.read_bandwidth_bytes_per_s = {log = ["1 TB/s", "8 TB/s"], n = 4}
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

from nodeperf.errors import NodeperfError
from nodeperf.suggest import did_you_mean, format_problems
from simulator.engines.options import SETTINGS
from simulator.sweep.filters import FilterError, FilterExpression, compile_filter

__all__ = [
    "EXPERIMENT_SCHEMA",
    "ExperimentError",
    "Axis",
    "Experiment",
    "load_experiment",
    "parse_experiment",
    "MODEL_METRICS",
    "COST_METRICS",
    "COST_KEYS",
    "SYSTOLIC_METRICS",
    "WORKLOAD_KEYS",
    "OPTION_KEYS",
    "SYSTOLIC_KEYS",
    "DEFAULT_MAX_POINTS",
    "MAX_AXIS_VALUES",
]

EXPERIMENT_SCHEMA = "nodeperf.experiment/1"
#: Points a sweep runs without being asked for more (``max_points`` in the file, ``--max-points``).
DEFAULT_MAX_POINTS = 1_000_000
#: Values one axis may have (a range is counted before its values are made).
MAX_AXIS_VALUES = 10_000_000

#: Metrics of a point evaluated by the analytical (or discrete-event) engine, and what they mean.
MODEL_METRICS: dict[str, str] = {
    "latency_s": "time of the whole graph (one step, one request phase, one forward pass), s",
    "energy_j": "energy of the whole graph on the device (dynamic + static), J",
    "throughput_per_s": "items per second: tokens (batch x seq) for sequence models, samples (batch) for "
                        "vision models and graphs without a sequence, divided by latency_s",
    "memory_bytes": "peak bytes resident per device (weights, activations, KV cache, gradients, optimizer state)",
    "power_w": "average power over the graph, energy_j / latency_s, W",
}

#: Metrics of a model point priced by its device-hours (:func:`hwmodels.cost.run_cost`, the [cost] settings):
#: asked for by name, or by default when the file has a [cost] table or cost axes.
COST_METRICS: dict[str, str] = {
    "usd_per_hour": "price of the point's devices per hour (tp x pp x dp x cp devices x the device-hour price of "
                    "cost.mode), USD/h",
    "usd_per_million_items": "USD per million of throughput_per_s's items: usd_per_hour / 3600 / throughput_per_s "
                             "x 1e6",
}

#: Metrics of a systolic-array point (SCALE-Sim-style layers on an R x C array).
SYSTOLIC_METRICS: dict[str, str] = {
    "cycles": "array clock cycles including stalls, prefetch and drain (summed over the layers of the point)",
    "compute_cycles": "stall-free cycles (SCALE-Sim's 'Total Cycles'), summed over the layers",
    "stall_cycles": "cycles the array waits on DRAM, summed over the layers",
    "utilisation": "fraction of PE-cycles doing a multiply-accumulate: MACs / (cycles x rows x cols), 0..1",
    "dram_bytes": "DRAM traffic (ifmap, filter reads; ofmap writes and partial-sum reads), bytes",
    "latency_s": "cycles / clock_hz (needs systolic clock_hz), s",
    "energy_j": "energy of the layers: MACs, PE-to-PE registers, scratchpads, DRAM and leakage over cycles / clock "
                "(hwmodels/catalog/defaults/systolic_energy.toml; MACs in workload.dtype, else the dtype of a "
                "word_bytes word; clock_hz, else the file's clock), J",
}

_PHASES = ("forward", "prefill", "decode", "train")
_OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")


@cache
def _recompute_policies() -> tuple[str, ...]:
    """The named recomputation policies (:data:`workloads.recompute.POLICIES`; MaxText's ``custom`` needs
    its ``custom:NAME=CHOICE,...`` text, which an axis does not carry)."""
    from workloads.recompute import POLICIES

    return tuple(p for p in POLICIES if p != "custom")


@cache
def _fp8_recipes() -> tuple[str, ...]:
    from workloads.precision import FP8_RECIPES

    return tuple(FP8_RECIPES)


@cache
def _offload_choices() -> tuple[str, ...]:
    """``none`` and every non-empty set of :data:`workloads.parallel.OFFLOAD_TARGETS`, comma-separated in the
    tuple's order (``activations,optimizer``)."""
    from itertools import combinations

    from workloads.parallel import OFFLOAD_TARGETS

    sets = [",".join(c) for n in range(1, len(OFFLOAD_TARGETS) + 1) for c in combinations(OFFLOAD_TARGETS, n)]
    return ("none", *sets)


@cache
def _plan_choices(name: str) -> tuple[str, ...]:
    import workloads.parallel as wp
    from workloads.zoo import transformer as zt

    return tuple(x for x in {"pipeline_split": wp.PIPELINE_SPLITS, "moe_dispatch": zt.MOE_DISPATCH_MODES,
                             "moe_routing": zt.MOE_ROUTINGS, "grad_reduce_dtype": wp.GRAD_REDUCE_DTYPES,
                             "param_dtype": wp.PARAM_DTYPES, "cuda_graph": wp.CUDA_GRAPHS}[name] if x)


@dataclass(frozen=True)
class _Key:
    """How one settable key parses: its type, allowed choices, lower bound, and whether it may be an axis."""

    kind: str  # int | float | bool | str | quantity | fusion
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()  # a function: read on first use (lazy imports)
    minimum: float | None = None
    unit: str = ""
    axis: bool = True
    doc: str = ""

    def allowed(self) -> tuple[str, ...]:
        """The allowed values (``choices``, called when it is a function)."""
        return self.choices() if callable(self.choices) else self.choices


def _dtype_names() -> tuple[str, ...]:
    from workloads.dtypes import DType

    return tuple(d.value for d in DType)


def _schedules() -> tuple[str, ...]:
    from workloads.parallel import SCHEDULES

    return tuple(SCHEDULES)


WORKLOAD_KEYS: dict[str, _Key] = {
    "model": _Key("str", doc="zoo name, micro-workload (gemm:m=..,n=..,k=..), .onnx or config.json path"),
    "phase": _Key("str", _PHASES, doc="forward | prefill | decode | train"),
    "batch": _Key("int", minimum=1, doc="batch size"),
    "seq": _Key("int", minimum=1, doc="sequence length (image side for vision models)"),
    "context": _Key("int", minimum=1, doc="KV-cache length already present (decode)"),
    "dtype": _Key("str", doc="compute/storage dtype"),
    "train": _Key("bool", doc="a whole training step"),
    "optimizer": _Key("str", _OPTIMIZERS, doc="optimizer of the training step"),
    "recompute": _Key("str", _recompute_policies, doc="activation recomputation in training: none, selective, "
                      "full, selective-op or a MaxText remat policy (as predict --recompute)"),
    "fp8_linears": _Key("str", _fp8_recipes, doc="training: the linear layers' GEMMs in fp8 (or int8) with this "
                        "scaling recipe, as predict --fp8-linears (a plan step; none given: one device)"),
    "topology": _Key("str", axis=False, doc="systolic experiments: a SCALE-Sim topology CSV (instead of a model)"),
}

_PLAN_INT = ("tp", "pp", "dp", "ep", "cp", "microbatch", "interleave", "global_batch")
OPTION_KEYS: dict[str, _Key] = {
    "engine": _Key("str", ("analytical", "des"), doc="analytical | des (discrete-event)"),
    "streams": _Key("int", minimum=1, doc="compute streams of the discrete-event engine"),
    **{name: _Key(s.kind, s.choices, doc=s.doc) for name, s in SETTINGS.items()},  # engine settings
    **{k: _Key("int", minimum=1, doc=f"parallel plan: {k}") for k in _PLAN_INT},
    "zero_stage": _Key("int", minimum=0, doc="parallel plan: ZeRO stage 0-3"),
    "sequence_parallel": _Key("bool", doc="parallel plan: Megatron sequence parallelism"),
    "fsdp": _Key("bool", doc="parallel plan: PyTorch FSDP full sharding"),
    "schedule": _Key("str", doc="parallel plan: pipeline schedule"),
    "shard_group": _Key("int", minimum=0, doc="parallel plan: with fsdp, hybrid sharding within groups of N ranks "
                        "(0: over all dp ranks)"),
    "offload": _Key("str", _offload_choices, doc="parallel plan: what lives in host memory (none, or "
                    "activations, optimizer, params comma-separated in that order)"),
    "capacity_factor": _Key("float", minimum=0.0, doc="parallel plan: MoE expert capacity factor (tokens beyond "
                            "it dropped; unset: dropless)"),
    "pipeline_split": _Key("str", partial(_plan_choices, "pipeline_split"), doc="parallel plan: a framework's split of the "
                           "layers over the stages"),
    "moe_dispatch": _Key("str", partial(_plan_choices, "moe_dispatch"), doc="parallel plan: how MoE tokens reach experts"),
    "moe_routing": _Key("str", partial(_plan_choices, "moe_routing"), doc="parallel plan: how the router spreads experts"),
    "moe_host_sync": _Key("bool", doc="parallel plan: the MoE dispatcher syncs with the host every MoE layer"),
    "grad_reduce_dtype": _Key("str", partial(_plan_choices, "grad_reduce_dtype"), doc="parallel plan: the dtype gradients "
                              "are reduced in"),
    "param_dtype": _Key("str", partial(_plan_choices, "param_dtype"), doc="parallel plan: the dtype parameters are stored "
                        "in (TPU stacks)"),
    "fp8_param": _Key("bool", doc="parallel plan: fp8 linear weights kept in fp8 (TE fp8_param_gather)"),
    "fsdp_fp8_all_gather": _Key("bool", doc="parallel plan, training with fsdp and fp8_linears tensorwise: FSDP2 "
                                "gathers the fp8 linear weights in fp8 (torchao enable_fsdp_float8_all_gather)"),
    "loss_chunks": _Key("int", minimum=1, doc="parallel plan: the loss over N chunks of the tokens"),
    "etp": _Key("int", minimum=0, doc="parallel plan: expert tensor parallelism (0: the plan's tp)"),
    "moe_a2a_overlap": _Key("bool", doc="parallel plan, training: Megatron-Core's combined 1F1B schedule, the "
                            "expert-parallel all-to-alls beside another microbatch's compute (ep > 1; pp > 1 needs "
                            "the interleaved schedule; engine analytical)"),
    "pipeline_microbatches": _Key("int", minimum=0, doc="parallel plan, training with pp > 1: microbatches of one "
                                  "pipeline schedule run, the schedule run once per N (torch.distributed.pipelining, "
                                  "NeMo AutoModel); 0: all in one run"),
    "grad_sync_per_step": _Key("bool", doc="parallel plan: with fsdp and pipeline_microbatches, FSDP2's gradient "
                               "sync once a step (NeMo AutoModel) rather than once a schedule run"),
    "p2p_host_sync": _Key("bool", doc="parallel plan: the device synchronised after every pipeline stage exchange "
                          "(Megatron-Core batch_p2p_sync)"),
    "recompute_output_copy": _Key("bool", doc="parallel plan, training with recompute modules:...: each recomputed "
                                  "layernorm / moe_act / mla_up_proj output copied back into its released storage "
                                  "(Megatron-Core before f54403492e)"),
    "cuda_graph": _Key("str", partial(_plan_choices, "cuda_graph"), doc="parallel plan, training: full_iteration, "
                       "Megatron-Core's cuda_graph_impl full_iteration (the step's forward-backward in one CUDA graph; "
                       "unset: none); transformer_engine, its per-layer graphs of whole layers (a narrower "
                       "cuda_graph_scope: predict --cuda-graph-scope or the ParallelPlan field)"),
    "moe_rank_capacity_factor": _Key("float", minimum=0.0, doc="parallel plan, training, MoE: HybridEP's static "
                                     "per-rank budget of local tokens x top-k x this factor rows (Megatron-Core "
                                     "moe_expert_rank_capacity_factor; moe_dispatch hybridep); memory only, no token is dropped; unset: sized "
                                     "per step"),
}
#: Option keys that are :class:`workloads.parallel.ParallelPlan` fields (every scalar field but
#: ``global_batch``'s None default and ``stage_layers``, a list no axis carries).
PLAN_KEYS: frozenset[str] = frozenset({*_PLAN_INT, "zero_stage", "sequence_parallel", "fsdp", "schedule", "shard_group",
                                       "offload", "capacity_factor", "pipeline_split", "moe_dispatch", "moe_routing",
                                       "moe_host_sync", "grad_reduce_dtype", "param_dtype", "fp8_param", "loss_chunks",
                                       "fsdp_fp8_all_gather", "etp", "moe_a2a_overlap", "pipeline_microbatches", "grad_sync_per_step",
                                       "p2p_host_sync", "cuda_graph", "moe_rank_capacity_factor",
                                       "recompute_output_copy"})

SYSTOLIC_KEYS: dict[str, _Key] = {
    "rows": _Key("int", minimum=1, doc="PE rows of the array"),
    "cols": _Key("int", minimum=1, doc="PE columns of the array"),
    "dataflow": _Key("str", ("os", "ws", "is"), doc="os | ws | is"),
    "sram_bytes": _Key("quantity", unit="B", doc="each of the ifmap, filter and ofmap scratchpads"),
    "ifmap_sram_bytes": _Key("quantity", unit="B", doc="ifmap scratchpad"),
    "filter_sram_bytes": _Key("quantity", unit="B", doc="filter scratchpad"),
    "ofmap_sram_bytes": _Key("quantity", unit="B", doc="ofmap scratchpad"),
    "dram_words_per_cycle": _Key("float", minimum=0.0, doc="DRAM bandwidth shared by the operands, words/cycle"),
    "word_bytes": _Key("int", minimum=1, axis=False, doc="bytes per word (default 1, SCALE-Sim's)"),
    "clock_hz": _Key("quantity", unit="Hz", axis=False, doc="array clock, for latency_s"),
    "per_layer": _Key("bool", axis=False, doc="one point per layer (column workload.layer)"),
}

def _price_modes() -> tuple[str, ...]:
    from hwmodels.cost import PRICE_MODES

    return PRICE_MODES


#: How a model point's device-hours are priced (:class:`hwmodels.cost.Pricing`; the cost metrics).
COST_KEYS: dict[str, _Key] = {
    "mode": _Key("str", _price_modes, doc="cloud (on-demand rent, default) | tco (purchase amortised + electricity)"),
    "years": _Key("float", minimum=0.0, doc="tco: years the purchase is amortised over (> 0)"),
    "pue": _Key("float", minimum=1.0, doc="tco: data-centre power usage effectiveness (>= 1)"),
    "usd_per_kwh": _Key("float", minimum=0.0, doc="tco: electricity price, USD per kWh"),
    "utilization": _Key("float", minimum=0.0, doc="tco: fraction of wall-clock hours of paid work (0, 1]; default 1"),
    "prices": _Key("str", axis=False, doc="a price file (default hwmodels/catalog/prices.toml)"),
}

HARDWARE_FIXED = ("name", "calibration")
_SECTIONS = ("workload", "hardware", "options", "systolic", "cost")
_TOP_KEYS = ("schema", "name", "description", "combine", "zip", "filters", "metrics", "max_points", "workload",
             "hardware", "options", "systolic", "cost", "axes")
_AXIS_FORMS = ("values", "range", "log", "pow2", "n", "step")


class ExperimentError(NodeperfError, ValueError):
    """An experiment file is invalid; the message lists every located problem."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems) or (message,)


@dataclass(frozen=True)
class Axis:
    """One swept quantity: its store column (``section.key``), its values (SI, canonical), and its unit."""

    name: str
    section: str
    key: str
    values: tuple[Any, ...]
    unit: str = ""


@dataclass(frozen=True)
class Experiment:
    """A validated experiment file.

    Attributes
    ----------
    path
        The file (``"<string>"`` when parsed from text).
    name, description
        From the file.
    kind
        ``"model"`` (operator graphs on a device spec) or ``"systolic"`` (topology layers on an array).
    fixed
        Base settings per section (``workload``, ``hardware``, ``options``, ``systolic``), canonical values.
    axes
        The swept quantities, in file order.
    zip_groups
        Axes combined element by element (each group is one dimension of the product).
    filters
        Expressions a point must satisfy (Python syntax over column names).
    metrics
        Metrics the store keeps.
    hardware_units
        SI unit of each swept hardware path.
    """

    path: str
    name: str
    description: str
    kind: str
    fixed: Mapping[str, Mapping[str, Any]]
    axes: tuple[Axis, ...]
    zip_groups: tuple[tuple[str, ...], ...]
    filters: tuple[str, ...]
    metrics: tuple[str, ...]
    hardware_units: Mapping[str, str] = field(default_factory=dict)
    _filter_code: tuple[Any, ...] = field(default=(), repr=False, compare=False)
    max_points: int = DEFAULT_MAX_POINTS

    @property
    def base_dir(self) -> Path:
        """Folder relative paths in the file are resolved against."""
        return Path(self.path).parent if self.path != "<string>" else Path.cwd()

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def size(self) -> int:
        """Points before filters."""
        by = {a.name: a for a in self.axes}
        n = 1
        for group in self._dimensions():
            n *= len(by[group[0]].values)
        return n

    def check_size(self, max_points: int | None = None) -> None:
        """Refuse a grid of more than ``max_points`` points (default: the file's ``max_points``).

        Raises
        ------
        ExperimentError
            Naming each dimension and its size, the product, and how to raise the limit.
        """
        limit = self.max_points if max_points is None else max_points
        n = self.size
        if n <= limit:
            return
        by = {a.name: a for a in self.axes}
        dims = " x ".join(f"{' + '.join(g)} ({len(by[g[0]].values):,})" for g in self._dimensions())
        raise ExperimentError(f"{self.path}: axes: {n:,} points before filters ({dims}); expected at most "
                              f"{limit:,} (raise it with max_points = N in the file or --max-points N, or "
                              "narrow the axes)")

    def _dimensions(self) -> list[tuple[str, ...]]:
        zipped = {n for g in self.zip_groups for n in g}
        dims: list[tuple[str, ...]] = []
        seen: set[str] = set()
        for a in self.axes:
            if a.name in seen:
                continue
            if a.name in zipped:
                g = next(g for g in self.zip_groups if a.name in g)
                dims.append(g)
                seen.update(g)
            else:
                dims.append((a.name,))
                seen.add(a.name)
        return dims

    def points(self) -> Iterator[dict[str, Any]]:
        """Each point as ``{axis column: value}``, in product order, filters applied."""
        by = {a.name: a for a in self.axes}
        dims = self._dimensions()
        choices = [list(zip(*(by[n].values for n in g), strict=True)) for g in dims]
        names = [n for g in dims for n in g]
        env_fixed = self.fixed_columns()
        for combo in itertools.product(*choices):
            point = dict(zip(names, itertools.chain.from_iterable(combo), strict=True))
            if self._filter_code and not self._accept({**env_fixed, **point}):
                continue
            yield {a.name: point[a.name] for a in self.axes}

    def fixed_columns(self) -> dict[str, Any]:
        """Base settings as ``{section.key: value}`` (what a filter may name besides the axes)."""
        out: dict[str, Any] = {}
        for sec, vals in self.fixed.items():
            for k, v in vals.items():
                out[f"{sec}.{k}"] = v
        return out

    def _accept(self, env: Mapping[str, Any]) -> bool:
        for f in self._filter_code:
            try:
                ok = f(env)
            except FilterError as exc:
                point = ", ".join(f"{n} = {env.get(n)!r}" for n in f.names)
                raise ExperimentError(f"{self.path}: filters: cannot evaluate {f.text!r} at {point} ({exc})") from None
            if not ok:
                return False
        return True


# ------------------------------------------------------------------------------------------------
# reading


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment TOML file.

    Raises
    ------
    FileNotFoundError
        No such file.
    ExperimentError
        Every problem of the file, located (``file:line: key: problem; got ...; expected ...``).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such experiment file; got {str(path)!r}; expected an experiment TOML "
                                "(see docs/sweep.md)")
    from hwmodels.loader import read_toml
    from hwmodels.spec import SpecError

    try:  # regular file, size, UTF-8, nesting depth and syntax, each one located line
        data = read_toml(p)
    except SpecError as exc:
        raise ExperimentError(str(exc)) from None
    text = p.read_text(encoding="utf-8")
    return parse_experiment(data, path=str(p), text=text)


def parse_experiment(data: Mapping[str, Any], *, path: str = "<string>", text: str = "") -> Experiment:
    """Validate an experiment already read from TOML (``text`` locates problems by line)."""
    return _Parser(data, path, text).parse()


class _Parser:
    def __init__(self, data: Mapping[str, Any], path: str, text: str) -> None:
        self.data = data
        self.path = path
        self.lines = text.splitlines()
        self.problems: list[str] = []
        self.base_dir = Path(path).parent if path != "<string>" else Path.cwd()

    # -- problem reporting ------------------------------------------------------------------
    def where(self, key: str) -> str:
        line = self._line_of(key)
        return f"{self.path}:{line}" if line else self.path

    def _line_of(self, key: str) -> int | None:
        parts = key.split(".")
        leaf = parts[-1]
        # the most specific section header that opens the key, then the key's own line below it
        start, prefix = 0, r"(?:[\w\"'.-]*\.)?"
        for n in range(len(parts) - 1, 0, -1):
            head = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(re.escape(x) for x in parts[:n]) + r"\s*\]\s*$")
            hit = next((i for i, ln in enumerate(self.lines) if head.match(ln)), None)
            if hit is not None:
                start = hit
                break
        else:  # no section opens a dotted key: only its dotted form (a top-level key of the same leaf is another key)
            if len(parts) > 1:
                prefix = r"\s*\.\s*".join(re.escape(x) for x in parts[:-1]) + r"\s*\.\s*"
        pat = re.compile(r"^\s*" + prefix + r"[\"']?" + re.escape(leaf) + r"[\"']?\s*=")
        for i in range(start, len(self.lines)):
            if pat.match(self.lines[i]):
                return i + 1
        return self._table_line(parts)

    def _table_line(self, parts: list[str]) -> int | None:
        """The line of the first header opening table ``parts`` (``[a.b]``, ``[[a.b]]`` or a sub-table ``[a.b.c]``):
        a key given as a table has no ``key =`` line."""
        head = re.compile(r"^\s*\[\[?\s*" + r"\s*\.\s*".join(re.escape(x) for x in parts) + r"\s*[\].]")
        return next((i + 1 for i, ln in enumerate(self.lines) if head.match(ln)), None)

    def problem(self, key: str, msg: str) -> None:
        self.problems.append(f"{self.where(key)}: {key}: {msg}")

    # -- top level ------------------------------------------------------------------------
    def parse(self) -> Experiment:
        d = self.data
        for k in d:
            if k not in _TOP_KEYS:
                self.problem(k, f"unknown key; got {k!r}; expected one of {', '.join(_TOP_KEYS)}"
                                f"{did_you_mean(k, _TOP_KEYS)}")
        schema = d.get("schema", EXPERIMENT_SCHEMA)
        if schema != EXPERIMENT_SCHEMA:
            self.problem("schema", f"unknown experiment schema; got {schema!r}; expected {EXPERIMENT_SCHEMA!r}")
        name = d.get("name", Path(self.path).stem if self.path != "<string>" else "experiment")
        if not isinstance(name, str) or not name.strip():
            self.problem("name", f"not a name; got {name!r}; expected a non-empty string")
            name = "experiment"
        desc = d.get("description", "")
        if not isinstance(desc, str):
            self.problem("description", f"not a string; got {desc!r}; expected text")
            desc = ""
        for sec in _SECTIONS:
            if sec in d and not isinstance(d[sec], Mapping):
                self.problem(sec, f"not a table; got {d[sec]!r}; expected a [{sec}] table")
        axes_raw = d.get("axes", {})
        if not isinstance(axes_raw, Mapping):
            self.problem("axes", f"not a table; got {axes_raw!r}; expected [axes.<section>] tables")
            axes_raw = {}
        for sec in axes_raw:
            if sec not in _SECTIONS:
                self.problem(f"axes.{sec}", f"unknown axis section; got {sec!r}; expected one of "
                                            f"{', '.join(_SECTIONS)}{did_you_mean(sec, _SECTIONS)}")
            elif not isinstance(axes_raw[sec], Mapping):
                self.problem(f"axes.{sec}", f"not a table; got {axes_raw[sec]!r}; expected key = [values]")
        systolic = isinstance(d.get("systolic"), Mapping) or isinstance(axes_raw.get("systolic"), Mapping)
        kind = "systolic" if systolic else "model"

        fixed: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
        axes: list[Axis] = []
        # workload, options, systolic: closed key sets
        for sec, keys in (("workload", WORKLOAD_KEYS), ("options", OPTION_KEYS), ("systolic", SYSTOLIC_KEYS),
                          ("cost", COST_KEYS)):
            table = d.get(sec, {}) if isinstance(d.get(sec, {}), Mapping) else {}
            for k, v in table.items():
                spec = self._known(sec, k, keys)
                if spec is None:
                    continue
                if isinstance(v, Mapping) or (isinstance(v, list) and spec.kind != "str"):
                    self.problem(f"{sec}.{k}", f"a base setting takes one value; got {v!r}; expected one value "
                                               f"(sweep it under [axes.{sec}])")
                    continue
                val = self._value(f"{sec}.{k}", v, spec)
                if val is not _BAD:
                    fixed[sec][k] = val
            ax = axes_raw.get(sec, {}) if isinstance(axes_raw.get(sec, {}), Mapping) else {}
            for k, v in _flatten_axes(ax):
                spec = self._known(f"axes.{sec}", k, keys)
                if spec is None:
                    continue
                if not spec.axis:
                    self.problem(f"axes.{sec}.{k}", f"cannot be swept; got an axis; expected one value in [{sec}]")
                    continue
                if k in fixed[sec]:
                    self.problem(f"axes.{sec}.{k}", f"also set in [{sec}]; got both; expected one of them")
                    continue
                vals = self._axis_values(f"axes.{sec}.{k}", v, spec)
                if vals is not None:
                    axes.append(Axis(f"{sec}.{k}", sec, k, vals, spec.unit))
        # hardware: name / calibration fixed; spec paths by axis
        hw_units: dict[str, str] = {}
        hw_table = d.get("hardware", {}) if isinstance(d.get("hardware", {}), Mapping) else {}
        for k, v in hw_table.items():
            if k not in HARDWARE_FIXED:
                self.problem(f"hardware.{k}", f"unknown key; got {k!r}; expected name or calibration (spec "
                                              f"fields are swept under [axes.hardware]){did_you_mean(k, HARDWARE_FIXED)}")
            elif not isinstance(v, str) or not v.strip():
                self.problem(f"hardware.{k}", f"not a name; got {v!r}; expected a string")
            else:
                fixed["hardware"][k] = v
        hw_axes_raw = axes_raw.get("hardware", {}) if isinstance(axes_raw.get("hardware", {}), Mapping) else {}
        hw_items = _flatten_axes(hw_axes_raw)
        names: list[str] = []
        for k, v in hw_items:
            if k == "name":
                if "name" in fixed["hardware"]:
                    self.problem("axes.hardware.name", "also set in [hardware]; got both; expected one of them")
                    continue
                vals = self._axis_values("axes.hardware.name", v, _Key("str"))
                if vals is not None:
                    axes.append(Axis("hardware.name", "hardware", "name", vals))
                    names = list(vals)
        if "name" in fixed["hardware"]:
            names = [fixed["hardware"]["name"]]
        specs = self._hardware_specs(names, fixed["hardware"].get("calibration")) if kind == "model" else []
        if kind == "model" and not names:
            self.problem("hardware.name", "missing; got no hardware; expected name = \"<catalog name or TOML path>\" "
                                          "in [hardware] or an axes.hardware.name list")
        for k, v in hw_items:
            if k in ("name", "calibration"):
                if k == "calibration":
                    self.problem("axes.hardware.calibration", "cannot be swept; got an axis; expected "
                                                              "calibration in [hardware]")
                continue
            if kind == "systolic":
                self.problem(f"axes.hardware.{k}", "a systolic experiment has no device spec; got a spec path; "
                                                   "expected [axes.systolic] geometry keys")
                continue
            unit = self._hardware_path(k, specs)
            if unit is None:
                continue
            spec_key = _Key("choice" if unit == "" else "quantity", unit=unit)
            vals = self._axis_values(f"axes.hardware.{k}", v, spec_key)
            if vals is not None and self._hardware_values(f"axes.hardware.{k}", k, vals, specs):
                if unit == "count":
                    vals = tuple(int(x) for x in vals)
                axes.append(Axis(f"hardware.{k}", "hardware", k, vals, unit))
                hw_units[k] = unit
        self._kind_checks(kind, fixed, axes)
        zip_groups = self._zip(d.get("zip", None), d.get("combine", "product"), axes)
        metrics = self._metrics(d.get("metrics", None), kind, fixed)
        self._cost_checks(kind, fixed, axes, metrics)
        filters, codes = self._filters(d.get("filters", []), axes, fixed)
        max_points = d.get("max_points", DEFAULT_MAX_POINTS)
        if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 1:
            self.problem("max_points", f"not a positive integer; got {max_points!r}; expected e.g. max_points = "
                                       f"{DEFAULT_MAX_POINTS}")
            max_points = DEFAULT_MAX_POINTS
        if not self.problems:
            for a in axes:
                if a.section == "workload" and a.key == "model":
                    for m in a.values:
                        self._check_model("axes.workload.model", m)
            if "model" in fixed["workload"]:
                self._check_model("workload.model", fixed["workload"]["model"])
        if self.problems:
            raise ExperimentError(format_problems(self.path, self.problems, "experiment file"), self.problems)
        exp = Experiment(path=self.path, name=name, description=desc, kind=kind,
                         fixed={s: dict(v) for s, v in fixed.items() if v}, axes=tuple(axes),
                         zip_groups=zip_groups, filters=filters, metrics=metrics, hardware_units=hw_units,
                         _filter_code=codes, max_points=max_points)
        return exp

    # -- keys and values ------------------------------------------------------------------
    def _known(self, where: str, key: str, keys: Mapping[str, _Key]) -> _Key | None:
        spec = keys.get(key)
        if spec is None:
            self.problem(f"{where}.{key}", f"unknown key; got {key!r}; expected one of {', '.join(keys)}"
                                           f"{did_you_mean(key, keys)}")
        return spec

    def _value(self, where: str, raw: Any, spec: _Key) -> Any:
        try:
            return _parse_value(raw, spec, where)
        except ValueError as exc:
            self.problem(where, str(exc))
            return _BAD

    def _axis_values(self, where: str, raw: Any, spec: _Key) -> tuple[Any, ...] | None:
        try:
            vals = _expand_axis(raw, spec, where)
        except ValueError as exc:
            self.problem(where, str(exc))
            return None
        if not vals:
            self.problem(where, f"empty axis; got {raw!r}; expected at least one value")
            return None
        return vals

    def _hardware_specs(self, names: Sequence[str], calibration: str | None) -> list[Any]:
        from simulator.hardware import load_hardware

        specs = []
        for n in names:
            try:
                specs.append(load_hardware(_resolve_file(n, self.base_dir), calibration and
                                           str(_resolve_file(calibration, self.base_dir))))
            except (ValueError, FileNotFoundError, KeyError) as exc:
                msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
                key = "hardware.name" if "name" in self.data.get("hardware", {}) else "axes.hardware.name"
                self.problem(key, f"{msg}")
        return specs

    def _hardware_path(self, path: str, specs: Sequence[Any]) -> str | None:
        from hwmodels.paths import field_unit_of

        unit: str | None = None
        for s in specs:
            try:
                u = field_unit_of(s, path)
            except ValueError as exc:
                self.problem(f"axes.hardware.{path}", str(exc))
                return None
            if unit is not None and u != unit:
                self.problem(f"axes.hardware.{path}", f"different units on the swept devices; got {unit} and {u}")
                return None
            unit = u
        return unit

    def _hardware_values(self, where: str, path: str, vals: Sequence[Any], specs: Sequence[Any]) -> bool:
        """Every value is one the field takes on every swept device (bounds, choices)."""
        from hwmodels.paths import with_overrides

        for s in specs:
            for v in vals:
                try:
                    with_overrides(s, {path: v})
                except ValueError as exc:
                    self.problem(where, str(exc))
                    return False
        return True

    def _check_model(self, where: str, model: str) -> None:
        from workloads.micro import is_micro, parse_micro

        try:
            if is_micro(model):
                parse_micro(model)
            elif model.lower().endswith((".onnx", ".json")):
                p = _resolve_file(model, self.base_dir)
                if not Path(p).is_file():
                    raise ValueError(f"no such file; got {model!r}; expected an existing .onnx or .json file")
            else:
                from workloads.zoo import get_entry

                get_entry(model)
        except (ValueError, KeyError) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            self.problem(where, str(msg))

    def _kind_checks(self, kind: str, fixed: Mapping[str, Mapping[str, Any]], axes: Sequence[Axis]) -> None:
        swept = {a.name for a in axes}
        have = {f"{s}.{k}" for s, v in fixed.items() for k in v} | swept
        if kind == "systolic":
            if ("workload.topology" in have) == ("workload.model" in have):
                self.problem("workload.topology", "a systolic experiment's layers; got "
                             + ("both topology and model" if "workload.topology" in have else "neither") +
                             "; expected topology = \"layers.csv\" (a SCALE-Sim topology) or model = \"<zoo "
                             "name>\" (its convolutions and matmuls) in [workload]")
            elif "workload.topology" in have:
                top = fixed["workload"]["topology"]
                p = _resolve_file(top, self.base_dir)
                if not Path(p).is_file():
                    self.problem("workload.topology", f"no such file; got {top!r}; expected a SCALE-Sim topology "
                                                      "CSV (relative to the experiment file)")
                else:
                    from hwmodels.topology import read_topology

                    try:
                        read_topology(p)
                    except ValueError as exc:
                        self.problem("workload.topology", str(exc).splitlines()[0])
            for k in ("rows", "cols", "dataflow"):
                if f"systolic.{k}" not in have:
                    self.problem(f"systolic.{k}", f"missing; got no {k}; expected it in [systolic] or "
                                                  f"[axes.systolic]")
            for n in sorted(x for x in have if x.startswith("hardware.")):
                self.problem(n, "a systolic experiment has no device spec; got a hardware setting; expected "
                                "the array in [systolic] / [axes.systolic]")
            ok = {"workload.topology", "workload.model", "workload.batch", "workload.seq", "workload.dtype",
                  "workload.phase"}
            bad = sorted(n for n in have if n.startswith(("options.", "workload.")) and n not in ok)
            for n in bad:
                self.problem(n, "not a systolic setting; got a graph/evaluation setting in a systolic experiment; "
                                "expected workload topology, or model with batch, seq, dtype, phase, and "
                                "[systolic] keys")
            sizes = {k for k in ("ifmap_sram_bytes", "filter_sram_bytes", "ofmap_sram_bytes")
                     if f"systolic.{k}" in have}
            if "systolic.sram_bytes" in have and sizes:
                self.problem("systolic.sram_bytes", f"given with {', '.join(sorted(sizes))}; got both; expected "
                                                    "sram_bytes (all three) or the three sizes")
            elif sizes and len(sizes) != 3:
                missing = sorted({"ifmap_sram_bytes", "filter_sram_bytes", "ofmap_sram_bytes"} - sizes)
                self.problem("systolic", f"scratchpad sizes incomplete; got {', '.join(sorted(sizes))}; expected "
                                         f"also {', '.join(missing)} (or sram_bytes for all three)")
        else:
            if "workload.model" not in have:
                self.problem("workload.model", "missing; got no model; expected model = \"<zoo name>\" in "
                                               "[workload] or an axes.workload.model list")
            if "workload.topology" in have:
                self.problem("workload.topology", "only for systolic experiments; got a topology without "
                                                  "[systolic]; expected a [systolic] table or no topology")
            if "options.streams" in have:
                engines = ({fixed["options"]["engine"]} if "engine" in fixed["options"] else
                           set(next((a.values for a in axes if a.name == "options.engine"), ("analytical",))))
                if "des" not in engines:
                    self.problem("options.streams", "only the discrete-event engine has streams; got streams "
                                                    "without engine = \"des\"; expected engine = \"des\"")
        for where, sec, k, v in [(f"{s}.{k}", s, k, v) for s, t in fixed.items() for k, v in t.items()] + \
                [(f"axes.{a.name}", a.section, a.key, x) for a in axes for x in a.values]:
            if sec == "workload" and k == "dtype" and v not in _dtype_names():
                self.problem(where, f"unknown dtype; got {v!r}; expected one of "
                                    f"{', '.join(_dtype_names())}{did_you_mean(v, _dtype_names())}")
            if sec == "options" and k == "schedule" and v not in _schedules():
                self.problem(where, f"unknown schedule; got {v!r}; expected one of "
                                    f"{', '.join(_schedules())}{did_you_mean(v, _schedules())}")
            if sec == "options" and k == "zero_stage" and v > 3:
                self.problem(where, f"unknown ZeRO stage; got {v!r}; expected 0, 1, 2 or 3")

    def _zip(self, zip_raw: Any, combine: Any, axes: Sequence[Axis]) -> tuple[tuple[str, ...], ...]:
        names = [a.name for a in axes]
        if combine not in ("product", "zip"):
            self.problem("combine", f"unknown combination; got {combine!r}; expected \"product\" or \"zip\"")
            return ()
        if combine == "zip":
            if zip_raw is not None:
                self.problem("zip", "given with combine = \"zip\"; got both; expected zip groups with "
                                    "combine = \"product\"")
            groups = [names] if names else []
        else:
            if zip_raw is None:
                return ()
            if not isinstance(zip_raw, list) or not all(isinstance(g, list) for g in zip_raw):
                self.problem("zip", f"not a list of lists; got {zip_raw!r}; expected zip = [[\"axis\", \"axis\"], ...]")
                return ()
            groups = zip_raw
        out: list[tuple[str, ...]] = []
        used: set[str] = set()
        by = {a.name: a for a in axes}
        for g in groups:
            ok = True
            for n in g:
                if n not in by:
                    self.problem("zip", f"unknown axis; got {n!r}; expected one of {', '.join(names)}"
                                        f"{did_you_mean(str(n), names)}")
                    ok = False
                elif n in used:
                    self.problem("zip", f"axis in two zip groups; got {n!r} twice; expected each axis once")
                    ok = False
            if not ok or not g:
                continue
            lens = {n: len(by[n].values) for n in g}
            if len(set(lens.values())) > 1:
                self.problem("zip", "zipped axes of different lengths; got " +
                             ", ".join(f"{n}: {k}" for n, k in lens.items()) + "; expected equal lengths")
                continue
            used.update(g)
            out.append(tuple(g))
        return tuple(out)

    def _cost_checks(self, kind: str, fixed: Mapping[str, Mapping[str, Any]], axes: Sequence[Axis],
                     metrics: Sequence[str]) -> None:
        """The [cost] settings: a model experiment's, with every TCO input a ``tco`` mode needs."""
        have = set(fixed.get("cost", {})) | {a.key for a in axes if a.section == "cost"}
        if not have and not any(m in COST_METRICS for m in metrics):
            return
        if kind == "systolic":
            self.problem("cost", "a systolic experiment has no price model; got cost settings; expected a model "
                                 "experiment")
            return
        def values(key: str, default: tuple[Any, ...] = ()) -> list[Any]:
            if key in fixed["cost"]:
                return [fixed["cost"][key]]
            return list(next((a.values for a in axes if a.name == f"cost.{key}"), default))

        if any(not 0 < u <= 1 for u in values("utilization")):
            self.problem("cost.utilization", f"not a fraction; got {values('utilization')!r}; expected values in (0, 1]")
        if any(y <= 0 for y in values("years")):
            self.problem("cost.years", f"not positive; got {values('years')!r}; expected years > 0")
        prices = fixed["cost"].get("prices")
        if prices and not Path(_resolve_file(prices, self.base_dir)).is_file():
            self.problem("cost.prices", f"no such file; got {prices!r}; expected a price file (the format of "
                                        "hwmodels/catalog/prices.toml, relative to the experiment file)")
        missing = [k for k in ("years", "pue", "usd_per_kwh") if k not in have]
        if "tco" in values("mode", ("cloud",)) and missing:
            self.problem("cost.mode", f"tco needs {', '.join(missing)}; got none; expected them in [cost] or "
                                      "[axes.cost] (a data centre's own figures: no default is assumed)")

    def _metrics(self, raw: Any, kind: str, fixed: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
        table = SYSTOLIC_METRICS if kind == "systolic" else {**MODEL_METRICS, **COST_METRICS}
        if raw is None:
            names = [m for m in table if not (m == "latency_s" and kind == "systolic"
                                              and "clock_hz" not in fixed["systolic"])
                     and (m not in COST_METRICS or self._priced())]
            return tuple(names)
        if not isinstance(raw, list) or not raw:
            self.problem("metrics", f"not a list of metric names; got {raw!r}; expected e.g. "
                                    f"[{', '.join(repr(m) for m in list(table)[:2])}]")
            return ()
        out: list[str] = []
        for m in raw:
            if m not in table:
                other = MODEL_METRICS if kind == "systolic" else SYSTOLIC_METRICS
                why = f" (a {'model' if kind == 'systolic' else 'systolic'} metric)" if m in other else ""
                self.problem("metrics", f"unknown {kind} metric{why}; got {m!r}; expected one of "
                                        f"{', '.join(table)}{did_you_mean(str(m), table)}")
            elif m in out:
                self.problem("metrics", f"listed twice; got {m!r}; expected each metric once")
            else:
                if m == "latency_s" and kind == "systolic" and "clock_hz" not in fixed["systolic"]:
                    self.problem("metrics", "latency_s of a systolic array needs its clock; got no clock_hz; "
                                            "expected clock_hz = \"1 GHz\" in [systolic]")
                out.append(m)
        return tuple(out)

    def _priced(self) -> bool:
        """The file has a [cost] table or cost axes (the cost metrics are then listed by default)."""
        axes = self.data.get("axes", {})
        return isinstance(self.data.get("cost"), Mapping) or (isinstance(axes, Mapping)
                                                             and isinstance(axes.get("cost"), Mapping))

    def _filters(self, raw: Any, axes: Sequence[Axis],
                 fixed: Mapping[str, Mapping[str, Any]]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(f, str) for f in raw):
            self.problem("filters", f"not a list of expressions; got {raw!r}; expected e.g. "
                                    "[\"workload.batch * workload.context <= 65536\"]")
            return (), ()
        known = [a.name for a in axes] + [f"{s}.{k}" for s, t in fixed.items() for k in t]
        codes = []
        for text in raw:
            try:
                codes.append(_compile_filter(text, known))
            except ValueError as exc:
                self.problem("filters", str(exc))
        return tuple(raw), tuple(codes)


_BAD = object()


def _resolve_file(name: str, base: Path) -> str:
    """A hardware/topology/model name: paths (with a slash or a .toml/.csv/.onnx/.json suffix) relative to ``base``."""
    low = name.lower()
    if "/" in name or low.endswith((".toml", ".csv", ".onnx", ".json")):
        p = Path(name)
        if not p.is_absolute():
            p = base / p
        return str(p)
    return name


def _flatten_axes(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``[(dotted key, axis spec)]``: nested tables (dotted TOML keys) down to a list or an axis form."""
    out: list[tuple[str, Any]] = []
    for k, v in table.items():
        p = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v and not (set(v) & set(_AXIS_FORMS)):
            out.extend(_flatten_axes(v, p))
        else:
            out.append((p, v))
    return out


def _parse_value(raw: Any, spec: _Key, where: str) -> Any:
    """One value of a key, canonical (SI float for quantities, int, bool, str)."""
    k = spec.kind
    if k == "bool":
        if not isinstance(raw, bool):
            raise ValueError(f"not a boolean; got {raw!r}; expected true or false")
        return raw
    if k == "fusion":
        if isinstance(raw, bool):
            return raw
        if raw == "auto":
            return "auto"
        raise ValueError(f"not a fusion setting; got {raw!r}; expected true, false or \"auto\"")
    if k in ("str", "choice"):
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"not a name; got {raw!r}; expected a string")
        allowed = spec.allowed()
        if allowed and raw not in allowed:
            raise ValueError(f"unknown value; got {raw!r}; expected one of {', '.join(allowed)}"
                             f"{did_you_mean(raw, allowed)}")
        return raw
    if k == "int":
        if isinstance(raw, bool) or not isinstance(raw, int | float) or (isinstance(raw, float)
                                                                         and not raw.is_integer()):
            raise ValueError(f"not an integer; got {raw!r}; expected an integer"
                             + (f" >= {int(spec.minimum)}" if spec.minimum is not None else ""))
        v = int(raw)
        if spec.minimum is not None and v < spec.minimum:
            raise ValueError(f"too small; got {v}; expected an integer >= {int(spec.minimum)}")
        return v
    if k == "float":
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise ValueError(f"not a number; got {raw!r}; expected a finite number")
        if spec.minimum is not None and not raw > spec.minimum:
            raise ValueError(f"must be > {spec.minimum:g}; got {raw!r}")
        return float(raw)
    if k == "quantity":
        from hwmodels.paths import parse_quantity

        v = parse_quantity(raw, spec.unit, path="")
        if spec.unit == "count":
            return int(v)
        return float(v)
    raise AssertionError(k)  # pragma: no cover


def _expand_axis(raw: Any, spec: _Key, where: str) -> tuple[Any, ...]:
    """The values of one axis: a list, ``{values}``, ``{range, step|n}``, ``{log, n}`` or ``{pow2}``."""
    numeric = spec.kind in ("int", "float", "quantity")
    if isinstance(raw, list):
        items = raw
    elif isinstance(raw, Mapping):
        forms = [f for f in ("values", "range", "log", "pow2") if f in raw]
        extra = sorted(set(raw) - set(_AXIS_FORMS))
        if extra:
            raise ValueError(f"unknown axis form key; got {extra[0]!r}; expected values, range (with step or n), "
                             f"log (with n) or pow2{did_you_mean(extra[0], _AXIS_FORMS)}")
        if len(forms) != 1:
            raise ValueError(f"axis form; got {', '.join(forms) or 'none'}; expected exactly one of values, range, "
                             "log, pow2")
        form = forms[0]
        if form == "values":
            items = raw["values"]
            if not isinstance(items, list):
                raise ValueError(f"values: not a list; got {items!r}; expected [v1, v2, ...]")
        else:
            if not numeric:
                raise ValueError(f"{form}: only numeric keys take a range; got {raw!r}; expected a list of values")
            items = _numeric_form(form, raw, spec)
    else:
        raise ValueError(f"not an axis; got {raw!r}; expected a list, {{range = [a, b], step = s}}, "
                         "{log = [a, b], n = N} or {pow2 = [a, b]}")
    out: list[Any] = []
    seen: set[Any] = set()
    for i, v in enumerate(items):
        try:
            val = _parse_value(v, spec, where)
        except ValueError as exc:
            raise ValueError(f"value {i + 1}: {exc}") from None
        mark = (type(val) is bool, val)  # True and 1 stay distinct, as with the list test before
        if mark not in seen:
            seen.add(mark)
            out.append(val)
    return tuple(out)


def _num(raw: Any, spec: _Key, what: str) -> float:
    if spec.kind == "quantity":
        from hwmodels.paths import parse_quantity

        try:
            return parse_quantity(raw, spec.unit)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ValueError(f"{what}: not a number; got {raw!r}; expected a finite number")
    return float(raw)


def _numeric_form(form: str, raw: Mapping[str, Any], spec: _Key) -> list[Any]:
    ends = raw[form]
    if not isinstance(ends, list) or len(ends) != 2:
        raise ValueError(f"{form}: not a pair; got {ends!r}; expected [first, last]")
    a, b = (_num(e, spec, f"{form}[{i}]") for i, e in enumerate(ends))
    if a > b:
        raise ValueError(f"{form}: empty range; got first {ends[0]!r} > last {ends[1]!r}; expected first <= last")
    integral = spec.kind == "int" or spec.unit == "count"
    if form == "pow2":
        if "n" in raw or "step" in raw:
            raise ValueError("pow2: takes no n or step; got one; expected {pow2 = [first, last]}")
        if a <= 0:
            raise ValueError(f"pow2: must be positive; got {ends[0]!r}; expected first >= 1")
        lo, hi = math.ceil(math.log2(a) - 1e-12), math.floor(math.log2(b) + 1e-12)
        vals = [2.0**e for e in range(lo, hi + 1)]
        return [int(v) if integral else v for v in vals]
    n = raw.get("n")
    step = raw.get("step")
    if form == "log":
        if step is not None:
            raise ValueError("log: takes n, not step; got step; expected {log = [first, last], n = N}")
        if a <= 0:
            raise ValueError(f"log: must be positive; got {ends[0]!r}; expected first > 0")
    if (n is None) == (step is None):
        raise ValueError(f"{form}: got {'both n and step' if n is not None else 'neither n nor step'}; expected "
                         + ("n = N" if form == "log" else "n = N or step = S"))
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{form}: n; got {n!r}; expected an integer >= 1")
        if n > MAX_AXIS_VALUES:
            raise ValueError(f"{form}: n; got {n:,} values; expected at most {MAX_AXIS_VALUES:,} per axis")
        if n == 1:
            vals = [a]
        elif form == "log":
            r = (b / a) ** (1.0 / (n - 1))
            vals = [a * r**i for i in range(n - 1)] + [b]
        else:
            vals = [a + (b - a) * i / (n - 1) for i in range(n - 1)] + [b]
    else:
        s = _num(step, spec, "step")
        if not s > 0:
            raise ValueError(f"step: must be positive; got {step!r}; expected step > 0")
        span = (b - a) / s
        count = int(math.floor(span)) + 1 if math.isfinite(span) else None
        if count is not None and a + count * s <= b + 1e-9 * s:
            count += 1  # a last value within rounding of the end is kept
        if count is None or count > MAX_AXIS_VALUES:
            shown = f"{count:,}" if count is not None else "infinitely many"
            raise ValueError(f"range: {shown} values; got [{ends[0]!r}, {ends[1]!r}] by step {step!r}; "
                             f"expected at most {MAX_AXIS_VALUES:,} per axis (a larger step)")
        vals = [a + i * s for i in range(count)]
    if integral:
        return [int(round(v)) for v in vals]
    return [float(_round_sig(v)) for v in vals]


def _round_sig(x: float, digits: int = 12) -> float:
    """``x`` to 12 significant digits: a log range gives the same value on every machine and run."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


# ------------------------------------------------------------------------------------------------
# filters


def _compile_filter(text: str, known: Sequence[str]) -> FilterExpression:
    """A filter checked and ready to run (:mod:`simulator.sweep.filters`; a ValueError names the problem)."""
    return compile_filter(text, known)


def filter_function(text: str, known: Sequence[str], aliases: Mapping[str, str] | None = None, *,
                    missing_unordered: bool = False) -> Callable[[Mapping[str, Any]], bool]:
    """A filter expression as a function of ``{column: value}`` (used by ``sweep show --where`` and ``plot``;
    ``missing_unordered``: :func:`~simulator.sweep.filters.compile_filter`'s)."""
    return compile_filter(text, known, aliases, missing_unordered=missing_unordered)

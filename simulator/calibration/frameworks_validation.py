"""Validation against published timings of how people run models (eager PyTorch / Hugging Face, torch.compile, serving stacks).

Each row of ``hwmodels/measurements/published_frameworks.csv`` names its software stack in the
``framework`` column (``NAME[;optimizer=none][;attention=...][;mode=reduce-overhead]``, a profile of
:mod:`workloads.frameworks`). The row is predicted with that profile: the transformer graph the
stack launches (eager Hugging Face: attention over the full score matrix, activations op by op,
dropout in training...) and its costing (fusion, CUDA graphs, per-op dispatch). Nothing is fitted to
these rows; errors are summarised per framework.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibration.errors import ErrorSummary, summarize_errors
from simulator.calibration.measurements import Measurement, MeasurementError, MeasurementSet

__all__ = ["FRAMEWORKS_DATASET", "HOST_TIME_FIELDS", "load_framework_rows", "predict_framework_row", "row_breakdown",
           "validate_frameworks"]

FRAMEWORKS_DATASET = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_frameworks.csv"


def load_framework_rows(path: str | Path | None = None) -> tuple[MeasurementSet, list[tuple[Any, dict[str, str]]]]:
    """The measurements of ``path`` and, per row, its (profile, options) from the ``framework`` column.

    Raises
    ------
    MeasurementError
        A bad row (the measurement schema), a missing / unknown framework
        (``<file>:<line>: framework: unknown framework; got 'x'; expected one of ...; did you mean 'y'?``) or an
        module tree named in the notes that is unknown (``<file>:<line>: notes: unknown module tree; ...``) or
        matches no op of the row's graph (``<file>:<line>: notes: module tree 'x' matches no op of graph ...``),
        whatever the row's profile (a compiled row's notes must not name another model's code either).
    """
    from simulator.hardware import known_devices
    from workloads.frameworks import FrameworkError, parse_framework_field

    ms = MeasurementSet.load(Path(path) if path is not None else FRAMEWORKS_DATASET, devices=known_devices())
    out: list[tuple[Any, dict[str, str]]] = []
    problems: list[str] = []
    for m in ms:
        where = f"{m.where or m.id}: framework"
        if not m.framework:
            problems.append(f"{where}: empty value; got ''; expected a framework profile name (e.g. eager, sdpa)")
            continue
        try:
            out.append(parse_framework_field(m.framework, where))
            _check_module_tree(m, *out[-1])
        except FrameworkError as exc:
            problems.append(str(exc))
    if problems:
        from nodeperf.suggest import format_problems

        raise MeasurementError(format_problems(str(ms.source), problems, "the framework column"))
    return ms, out


def _check_module_tree(m: Measurement, profile: Any, opts: dict[str, str]) -> None:
    """Refuse (FrameworkError) a module tree the row's notes name that is unknown or matches no op of the row's
    graph; a row whose workload does not build is left to its prediction, which reports it."""
    from workloads.frameworks import module_tree_of, with_module_tree

    where = f"{m.where or m.id}: notes"
    tree = module_tree_of(m.notes, where)
    if tree is None:
        return
    try:
        graph = _graph(m, profile, opts)
    except (ValueError, KeyError):
        return
    with_module_tree(graph, tree, where)


#: A row whose notes hold this phrase timed a BERT masked-LM step with ``loss = logits.sum()`` and no attention
#: mask passed (the transformers SDPA training benchmark: :data:`workloads.frameworks.HF_MLM_SUM_SOURCE`); its
#: graph is :func:`workloads.frameworks.hf_masked_lm_forward`, its step :func:`workloads.frameworks.sum_loss`.
MLM_SUM_NOTE = "Timed step: masked-LM head, loss = logits.sum()"


def _mlm_sum_graph(m: Measurement, profile: Any, opts: dict[str, str], args: dict[str, Any]) -> Any:
    """The training step of a row stating :data:`MLM_SUM_NOTE`."""
    from workloads.frameworks import drop_optimizer, hf_masked_lm_forward, sum_loss
    from workloads.resolve import load_workload
    from workloads.training import training_graph

    args = {**args, "phase": "train", "train": False}  # the forward of a training step; derived below
    attention = {"attention": opts["attention"]} if "attention" in opts else {}
    fwd = load_workload(m.workload, framework=profile.name, **args, **attention)
    optimizer = opts.get("optimizer", "adamw")
    step = sum_loss(training_graph(hf_masked_lm_forward(fwd, profile.name),
                                   optimizer="adamw" if optimizer == "none" else optimizer))
    return drop_optimizer(step) if optimizer == "none" else step


def _graph(m: Measurement, profile: Any, opts: dict[str, str]) -> Any:
    from workloads.frameworks import drop_optimizer, with_profile_meta
    from workloads.resolve import load_workload

    args = m.workload_args()
    if m.train and MLM_SUM_NOTE in (m.notes or ""):
        try:
            return _mlm_sum_graph(m, profile, opts, args)
        except (ValueError, KeyError) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise type(exc)(f"{m.where or m.id}: workload: {msg}") from None
    extra: dict[str, Any] = {}
    if profile.changes_graph or "attention" in opts:
        extra["framework"] = profile.name
        if "attention" in opts:
            extra["attention"] = opts["attention"]
    optimizer = opts.get("optimizer", "adamw")
    try:
        g = load_workload(m.workload, optimizer="adamw" if optimizer == "none" else optimizer, **args, **extra)
    except (ValueError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise type(exc)(f"{m.where or m.id}: workload: {msg}") from None
    if optimizer == "none" and m.train:
        g = drop_optimizer(g)
    return g if "framework" in g.meta else with_profile_meta(g, profile)


def _row_costing(m: Measurement, profile: Any, opts: dict[str, str]) -> tuple[Any, Any, Any]:
    """(graph, device spec, EvalOptions) of one row under its stack's profile, as the row is predicted."""
    from hwmodels.catalog import load_device
    from simulator.calibration.predict import gemv_generated, timed_under_autocast
    from simulator.engines.analytical import EvalOptions
    from workloads.frameworks import (
        compile_conv_layout,
        mode_cost_options,
        module_tree_of,
        with_module_tree,
    )

    graph = _graph(m, profile, opts)
    if profile.name == "compile" and not m.train and timed_under_autocast(m.notes) \
            and not graph.meta.get("autocast"):
        # a compiled program traced under torch.autocast holds the weight casts as graph ops, run on every
        # call: AOTAutograd traces with the autocast cache off (pytorch/pytorch
        # torch/fx/experimental/proxy_tensor.py, disable_autocast_cache), and Inductor, which keeps the
        # parameters as graph inputs unless freezing is on, cannot fold them
        from workloads.frameworks import autocast_weight_casts

        graph = autocast_weight_casts(graph)
    if profile.name in ("eager", "sdpa") and not m.train and timed_under_autocast(m.notes) \
            and not graph.meta.get("autocast"):
        # one autocast region around the timed loop: the weight casts are cached after the first call, the
        # activations' casts are not (workloads.frameworks.AUTOCAST_ACTIVATION_SOURCE)
        from workloads.frameworks import autocast_activation_casts

        graph = autocast_activation_casts(graph)
    cost = mode_cost_options(profile.cost_options(), opts.get("mode"))
    if profile.name == "compile" and opts.get("mode") == "max-autotune":
        # contractions the run's printed AUTOTUNE log shows as won by the extern kernel take no epilogue
        from workloads.frameworks import autotune_extern_shapes, autotuned_extern

        graph = autotuned_extern(graph, autotune_extern_shapes(m.notes), f"{m.where or m.id}: notes")
    tree = module_tree_of(m.notes, f"{m.where or m.id}: notes")
    if tree is not None and cost.get("eager_modules"):
        # the model code's module calls the graph's op names do not show (workloads.frameworks.MODULE_TREES)
        graph = with_module_tree(graph, tree, f"{m.where or m.id}: notes")
    dev = load_device(m.device)
    if profile.name == "compile":  # gpt-fast / torchao set coordinate_descent_tuning: batch-1 GEMVs are generated
        cost["gemv_generated"] = gemv_generated(f"{m.framework_version} {m.source}")
        # no layout optimisation before torch 2.1, nor by default on ROCm (workloads.frameworks.INDUCTOR_LAYOUT_ROCM)
        cost["conv_layout"] = compile_conv_layout(m.framework_version, dev.vendor)
        if cost["conv_layout"] == "nhwc" and not m.train:
            # the layout optimisation copies contiguous input weights to channels last on every call
            from workloads.frameworks import inductor_layout_copies

            graph = inductor_layout_copies(graph)
    return graph, dev, EvalOptions(allow_tf32=m.dtype == "tf32", **cost)


def predict_framework_row(m: Measurement, profile: Any, opts: dict[str, str]) -> float:
    """Predicted seconds of one row under its stack's profile (graph and costing), unfitted."""
    from simulator.calibration.predict import quiet_engine
    from simulator.engines.analytical import evaluate

    graph, dev, eo = _row_costing(m, profile, opts)
    with quiet_engine():
        gpu_s = float(evaluate(graph, dev, eo).totals.latency_s)
    return gpu_s + engine_step_host_s(m, profile) + compiled_call_host_s(m, profile, opts.get("mode")) \
        + timed_sync_s(m, dev) + decode_step_extras_s(m, profile, dev, eo)


#: The ``efficiency`` fields :func:`row_breakdown` zeroes to leave the device's own time: the per-kernel launch floors,
#: eager dispatch and ``nn.Module`` calls. ``launch_overhead_s`` is defined as launch + kernel start/finish, partly
#: device time; on the GPU the analytical engine uses it only as each kernel's host floor (``max(device, floor)``;
#: the device's own per-kernel time is ``kernel_device_time_s``, kept), except that a ``linalg`` op (and a CPU op)
#: adds it once to its time, which zeroing removes from ``device_s`` too. ``host_sync_s`` is not listed: the
#: single-device engine does not read it (only the plan path's host syncs do); a row whose timer synchronises
#: after every call carries it in ``call_host_s`` (:func:`timed_sync_s`).
HOST_TIME_FIELDS = ("launch_overhead_s", "graph_launch_overhead_s", "framework_op_overhead_s",
                    "framework_conv_op_overhead_s", "framework_module_call_s", "framework_container_call_s")


def row_breakdown(m: Measurement, profile: Any, opts: dict[str, str]) -> dict[str, Any]:
    """Where one row's predicted time goes (a diagnostic; predictions do not use it): ``predicted_s`` (as
    :func:`predict_framework_row`), ``kernels`` launched, ``device_s`` (the same graph and options on a device whose
    :data:`HOST_TIME_FIELDS` are zero), ``host_s`` (the kernels' host floors and module calls summed, each op's
    :func:`simulator.engines.analytical.host_floor_s`), ``host_bound_ops`` (ops whose time is their host floor),
    ``call_host_s`` (:func:`compiled_call_host_s` plus :func:`engine_step_host_s` plus :func:`timed_sync_s`),
    ``decode_extras_s`` (a serving stack's sampler and eager ops around its decode graph,
    :func:`decode_step_extras_s`) and ``launch_bound`` (the host's sum exceeds the device's).

    What the split leaves where: the whole of ``launch_overhead_s`` / ``graph_launch_overhead_s`` counts as host
    time (``host_s``), its kernel start/finish share included, since the engine uses it only as a floor; the
    device's per-kernel time (``kernel_device_time_s``) stays in ``device_s``; a ``linalg`` op's one added
    ``launch_overhead_s`` leaves ``device_s`` though it is not in ``host_s``; ``host_sync_s`` is in neither (the
    engine does not charge it; a per-call synchronisation of the timer is in ``call_host_s``); ``call_host_s`` and
    ``decode_extras_s`` are outside both. So ``device_s`` is the GPU's time without
    the launch cost's device share, and ``device_s + host_s`` need not equal ``predicted_s``."""
    from dataclasses import replace

    from simulator.calibration.predict import quiet_engine
    from simulator.engines.analytical import evaluate, host_floor_s, launch_floor_s, module_host_s
    from simulator.engines.walk import module_call_counts

    graph, dev, eo = _row_costing(m, profile, opts)
    bare = replace(dev, efficiency=replace(dev.efficiency, **{f: 0.0 for f in HOST_TIME_FIELDS}))
    with quiet_engine():
        rep = evaluate(graph, dev, eo)
        device_s = float(evaluate(graph, bare, eo).totals.latency_s)
    eff, floor = dev.efficiency, launch_floor_s(dev, eo)
    mods = module_call_counts(graph) if (eo.eager_framework and eo.eager_modules) else {}
    host = [float(host_floor_s(r.rule, r.kernels, floor, eff, eo, module_host_s(mods.get(r.name, (0, 0)), eff)))
            for r in rep.records]
    call = engine_step_host_s(m, profile) + compiled_call_host_s(m, profile, opts.get("mode")) + timed_sync_s(m, dev)
    extras = decode_step_extras_s(m, profile, dev, eo)
    return {
        "predicted_s": float(rep.totals.latency_s) + call + extras, "kernels": int(sum(r.kernels for r in rep.records)),
        "device_s": device_s, "host_s": sum(host), "call_host_s": call, "decode_extras_s": extras,
        "host_bound_ops": sum(1 for r, h in zip(rep.records, host, strict=True) if r.kernels and h >= r.time_s),
        "launch_bound": sum(host) > device_s,
    }


#: gpt-fast's decode loop (and the torchao and ROCm-blog ``generate.py`` copies of it) never waits for the GPU
#: between tokens: pytorch-labs/gpt-fast generate.py ``multinomial_sample_one_no_sync`` ("Does multinomial
#: sampling without a cuda synchronization") and ``decode_n_tokens`` keep the sampled token on the device, so
#: the host's per-call time runs ahead of the GPU's step.
DECODE_LOOP_NO_SYNC = ("pytorch-labs/gpt-fast generate.py: multinomial_sample_one_no_sync and decode_n_tokens keep "
                       "the next token on the device (no host synchronisation per token)")
#: How a row names such a loop (its framework version, source or notes, lower case): gpt-fast and its copies,
#: torchao's ``generate.py``. Another decode loop (Hugging Face ``generate``, which reads the sampled token on the
#: host every step) pays the per-call host time.
_NO_SYNC_LOOPS = ("gpt-fast", "torchao generate.py")


def decode_loop_no_sync(m: Measurement) -> bool:
    """True when row ``m`` is a decode step timed in a loop that never synchronises (:data:`DECODE_LOOP_NO_SYNC`),
    as its framework version, source or notes name it."""
    text = f"{m.framework_version} {m.source} {m.notes}".lower()
    return m.phase == "decode" and any(s in text for s in _NO_SYNC_LOOPS)


def compiled_call_host_s(m: Measurement, profile: Any, mode: str | None) -> float:
    """Host time of one call of a compiled program outside its kernels (the profile's ``call_host_s``, plus
    ``graph_call_host_s`` under a CUDA-graph mode), serial with a step timed call by call; 0 for a decode step
    of a loop that never synchronises (:func:`decode_loop_no_sync`, gpt-fast's: the host runs ahead of the GPU)
    and for profiles without the figures. The figures are one 2025 measurement (pytorch/pytorch issue #150488,
    host and model unstated), assumed for torch 2.0.1 and for ROCm hosts too."""
    if decode_loop_no_sync(m):
        return 0.0
    graphs = mode in ("reduce-overhead", "max-autotune")
    return float(profile.call_host_s) + (float(profile.graph_call_host_s) if graphs else 0.0)


#: How a row's notes state a timer that synchronises after every call (the ROCm blog's ``timed()``:
#: ``torch.cuda.synchronize(); start = time.time(); fn(); torch.cuda.synchronize(); end = time.time()``).
_SYNC_PER_CALL = re.compile(r"\bfn\(\), synchronize, per call\b")


def timed_sync_s(m: Measurement, dev: Any) -> float:
    """The host's wait for the device at the end of each timed call, for a row whose notes state a timer that
    synchronises after every call (:data:`_SYNC_PER_CALL`): the device's ``efficiency.host_sync_s`` (the time a
    synchronisation adds after the last kernel, before the host's clock is read), serial with the call; 0 for
    other rows (a timer that synchronises once around many calls pays it once over all of them)."""
    if not _SYNC_PER_CALL.search(m.notes or ""):
        return 0.0
    return float(dev.efficiency.host_sync_s)


def engine_step_host_s(m: Measurement, profile: Any) -> float:
    """Host time a serving engine adds to each decode step of a row: the profile's
    ``iteration_host_s + iteration_host_per_seq_s x batch``, serial with the step's kernels as
    :meth:`simulator.serving.iteration.IterationPricer.host_time` charges it (a V0 vLLM engine schedules and
    prepares the next step's inputs on the critical path); 0 for other phases and for profiles without it."""
    if m.phase != "decode":
        return 0.0
    return float(profile.iteration_host_s) + float(profile.iteration_host_per_seq_s) * int(m.batch or 1)


def decode_sampler_s(m: Measurement, profile: Any, dev: Any, eo: Any) -> float:
    """Time (s) of the sampler a serving stack runs after each decode step's graph replay over the ``batch x vocab``
    logits of a decode row, as ``nodeperf serve`` prices it: the device time of the profile's ``sampler_kernels``
    (each its own kernel, as :meth:`simulator.serving.iteration.IterationPricer.head_point` adds them to the LM
    head) plus the sampler call's host time (``sampler_host_s + sampler_host_per_seq_s x batch``, serial where the
    engine waits for the sampled tokens, as :meth:`~simulator.serving.iteration.IterationPricer.host_time` adds it);
    0 for other phases and profiles without either."""
    if m.phase != "decode":
        return 0.0
    from simulator.serving.iteration import sampler_call_host_s

    kernels = tuple(getattr(profile, "sampler_kernels", ()) or ())
    host = sampler_call_host_s((float(getattr(profile, "sampler_host_s", 0.0)),
                                float(getattr(profile, "sampler_host_per_seq_s", 0.0))), int(m.batch or 1))
    return (_sampler_kernels_s(m, kernels, dev, eo) if kernels else 0.0) + host


def _sampler_kernels_s(m: Measurement, kernels: tuple[str, ...], dev: Any, eo: Any) -> float:
    """Device time (s) of the sampler ``kernels`` over a decode row's ``batch x vocab`` logits, unfused."""
    from dataclasses import replace

    from simulator.calibration.predict import quiet_engine
    from simulator.engines.analytical import evaluate
    from simulator.serving.iteration import resolve_config
    from workloads.serving import sampler_graph

    cfg, _ = resolve_config(m.workload)
    graph = sampler_graph(cfg, n=int(m.batch or 1), kernels=kernels, dtype=m.dtype or "bf16")
    with quiet_engine():
        rep = evaluate(graph, dev, replace(eo, fusion=False))
    return sum(float(r.time_s) for r in rep.records)


def decode_host_ops_s(m: Measurement, profile: Any, dev: Any, eo: Any) -> float:
    """Host time (s) of the eager ops and host synchronisations a synchronous engine runs around each decode
    graph replay (the profile's ``decode_host_ops`` x ``efficiency.framework_op_overhead_s`` + ``decode_host_syncs``
    x ``efficiency.host_sync_s``), serial with a decode row's step as
    :meth:`simulator.serving.iteration.IterationPricer.decode_host_time` charges it; 0 for other phases, without
    CUDA graphs, and for profiles without the counts."""
    ops, syncs = int(getattr(profile, "decode_host_ops", 0)), int(getattr(profile, "decode_host_syncs", 0))
    if m.phase != "decode" or not (ops or syncs) or not getattr(eo, "cuda_graphs", False):
        return 0.0
    from simulator.serving.iteration import eager_decode_host_s

    return eager_decode_host_s(ops, syncs, dev.efficiency)


def decode_step_extras_s(m: Measurement, profile: Any, dev: Any, eo: Any) -> float:
    """What a serving stack's decode step runs outside the model's graph, as ``nodeperf serve`` prices it: the
    sampler kernels (:func:`decode_sampler_s`) and the eager host ops and synchronisations around the replay
    (:func:`decode_host_ops_s`); 0 for a decode loop that never synchronises (:func:`decode_loop_no_sync`)."""
    if decode_loop_no_sync(m):
        return 0.0
    return decode_sampler_s(m, profile, dev, eo) + decode_host_ops_s(m, profile, dev, eo)


def validate_frameworks(path: str | Path | None = None, *, progress: bool | None = None) -> dict[str, Any]:
    """Predict every row and summarise the errors per framework (percent; nothing fitted).

    Returns
    -------
    dict
        ``rows`` (id, framework, device, dtype, measured_s, predicted_s, error_pct signed),
        ``by_framework`` ``{name: ErrorSummary}``, ``all`` (ErrorSummary) and ``dataset``.

    ``progress``: a bar per row on standard error (None: see :func:`simulator.report.progress.progress_enabled`).
    """
    from simulator.report.progress import track

    ms, parsed = load_framework_rows(path)
    pairs = track(list(zip(ms, parsed, strict=True)), desc="framework rows", unit="row", enabled=progress)
    pred = np.array([predict_framework_row(m, p, o) for m, (p, o) in pairs], dtype=float)
    names = [p.name for p, _ in parsed]
    by: dict[str, ErrorSummary] = {}
    for name in sorted(set(names)):
        idx = [i for i, n in enumerate(names) if n == name]
        by[name] = summarize_errors(pred[idx], MeasurementSet(tuple(ms[i] for i in idx), ms.source), worst=3,
                                    by_class=False)
    rows = [{"id": m.id, "framework": m.framework, "device": m.device, "dtype": m.dtype, "workload": m.workload,
             "batch": m.batch, "seq": m.seq, "measured_s": m.median_s, "predicted_s": float(p),
             "error_pct": 100.0 * (float(p) - m.median_s) / m.median_s} for m, p in zip(ms, pred, strict=True)]
    return {"dataset": str(ms.source), "rows": rows, "by_framework": by,
            "all": summarize_errors(pred, ms, worst=3, by_class=False)}

"""Validation of parallel predictions against published multi-device measurements, nothing fitted.

``hwmodels/measurements/published_multi.csv`` holds training and inference numbers measured on
8 to 6,144 GPUs with the parallel configuration each source prints. A row is predicted when
everything a prediction needs is stated there: a model in the zoo (by name or alias), a catalog
system (the ``Catalog:`` mapping in its notes), the tensor and pipeline degrees, the microbatch
and global batch, the recomputation and a dtype the graph can represent. The data-parallel degree,
when not printed, is ``n_devices / (tp pp)``; nothing else is assumed. Every other row is listed
as skipped with the missing piece, so the coverage is as visible as the error.

Metrics: ``iteration_time_s`` against the predicted iteration; ``mfu`` (Korthikanti et al. 2022:
model FLOPs without recomputation over the 312 TFLOP/s A100 peak) against the predicted MFU;
``tflops_per_device`` where the source counts recomputed FLOPs (Narayanan et al. 2021, Eq. 3)
against the predicted hardware FLOP/s per device (model FLOPs plus the recomputed forward);
``tokens_per_s_per_device`` against the global batch's tokens over the predicted iteration, per device.
Collective bus bandwidths come from :func:`hwmodels.collectives.compare_published`.

Inference rows are predicted when the source fixes the batch, the tensor (and pipeline) degree,
the input and output lengths and a dtype the graphs represent: 16-bit, or an fp8 engine whose notes
state that its GEMM weights and KV cache are fp8 (:func:`_serving_precision`; the parallel graphs then
take ``weight_dtype`` / ``kv_dtype``, :func:`workloads.precision.apply_precision`). ``decode`` rows
are one decode step at the stated context (``input_len``), ``prefill`` rows one prompt pass, ``e2e``
rows a whole request (:func:`~simulator.parallel.compose.generate_request`). A prompt pass whose notes state its
TensorRT-LLM engine's build runs it (:func:`_engine_build`: two gate/up GEMMs, the GEMM tactics of the context
profile's opt shape). Serving stacks (TensorRT-LLM,
FasterTransformer, vLLM, SGLang, DeepSpeed inference, TGI) run fused kernels, from CUDA graphs
unless the row's notes say "no CUDA graphs" (FasterTransformer's host loop; TensorRT-LLM's
``gptSessionBenchmark`` without ``--enable_cuda_graph``: kernels enqueued one by one); anything else
runs eagerly (:func:`simulator.calibration.predict.run_options` for the rest).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MultiRow", "validate_multi", "DEFAULT_MULTI_DATASET", "multi_summary", "collectives_summary", "COLLECTIVE_BANDS"]

DEFAULT_MULTI_DATASET = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_multi.csv"
_CATALOG = re.compile(r"Catalog(?: \([^)]*\))?: ([a-z0-9][a-z0-9\-]*)")
_METRICS = ("iteration_time_s", "mfu", "tflops_per_device", "tokens_per_s_per_device")
#: dtypes whose training graphs the model represents (fp8 training keeps non-GEMM ops in bf16, which
#: a per-tensor precision model would express; not yet)
_TRAIN_DTYPES = {"": "bf16", "bf16": "bf16", "fp16": "fp16"}


@dataclass(frozen=True)
class MultiRow:
    """One published row: predicted and measured values, or why it was not predicted."""

    id: str
    category: str
    model: str
    system: str
    metric: str
    measured: float
    predicted: float | None = None
    skipped: str = ""

    @property
    def ape(self) -> float:
        return 100.0 * abs(self.predicted - self.measured) / self.measured if self.predicted is not None else float("nan")

    @property
    def signed_error(self) -> float:
        return 100.0 * (self.predicted / self.measured - 1.0) if self.predicted is not None else float("nan")


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def _model_and_system(r: dict[str, str]) -> tuple[str, str]:
    """(catalog system of a row, or '' and why it cannot be predicted: a model outside the zoo or no
    catalog mapping in its notes)."""
    from workloads.zoo import get_entry

    try:
        get_entry(r["model"])
    except (KeyError, ValueError):
        return "", f"model {r['model']!r} is not in the zoo"
    m = _CATALOG.search(r["notes"])
    return (m.group(1), "") if m else ("", "no catalog system for the hardware")


def _predict_row(r: dict[str, str]) -> MultiRow:
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    base = MultiRow(r["id"], r["category"], r["model"], "", r["metric"], float(r["value"]))

    def skip(why: str) -> MultiRow:
        return MultiRow(base.id, base.category, base.model, base.system, base.metric, base.measured, skipped=why)

    if r["category"] == "inference":
        return _predict_inference(r, base, skip)
    if r["metric"] not in _METRICS:
        return skip(f"metric {r['metric']!r}: not compared yet")
    system, why = _model_and_system(r)
    if why:
        return skip(why)
    base = MultiRow(base.id, base.category, base.model, system, base.metric, base.measured)
    tp, pp, mb, gb, seq = (_int(r[k]) for k in ("tp", "pp", "microbatch", "global_batch", "seq"))
    n = _int(r["n_devices"])
    missing = [k for k, v in (("tp", tp), ("pp", pp), ("microbatch", mb), ("global_batch", gb), ("seq", seq)) if v is None]
    if missing:
        return skip(f"{', '.join(missing)} not stated")
    if not r["recompute"]:
        return skip("recomputation not stated")
    if r["dtype"] not in _TRAIN_DTYPES:
        return skip(f"dtype {r['dtype']!r}: fp8 training (GEMMs in fp8, the rest in bf16) not modelled yet")
    dp = _int(r["dp"]) or (n // (tp * pp) if n and n % (tp * pp) == 0 else None)
    if dp is None:
        return skip("data-parallel degree not derivable")
    from simulator.hardware import load_hardware

    plan = ParallelPlan(tp=tp, pp=pp, dp=dp, microbatch=mb, global_batch=gb,
                        sequence_parallel=r["sp"].strip() == "1",
                        p2p_host_sync=pp > 1 and _train_framework(r["framework"]) == "megatron-lm")
    res = evaluate_plan(r["model"], load_hardware(system), plan, train=True, seq=seq, recompute=r["recompute"],
                        dtype=_TRAIN_DTYPES[r["dtype"]], framework=_train_framework(r["framework"]))
    if r["metric"] == "iteration_time_s":
        pred = res.latency_s
    elif r["metric"] == "tokens_per_s_per_device":  # the global batch's tokens per iteration, per device
        pred = gb * seq / res.latency_s / (tp * pp * dp)
    elif r["metric"] == "mfu":
        pred = 100.0 * res.mfu if float(r["value"]) > 1 else res.mfu
    else:  # hardware FLOP/s per device: model FLOPs plus the recomputed forward (1/3 of them under full)
        extra = {"full": 4.0 / 3.0, "selective": 1.0, "none": 1.0}.get(r["recompute"], 1.0)
        pred = res.model_flops_per_s_per_device * extra / 1e12
    return MultiRow(base.id, base.category, base.model, system, base.metric, base.measured, predicted=pred)


def _train_framework(framework: str) -> str:
    """The :mod:`workloads.frameworks` profile of a training row's stack: ``megatron-lm`` for Megatron-LM before
    Megatron-Core (the Narayanan et al. 2021 and Korthikanti et al. 2022 runs: unfused attention, dropout
    kernels); '' (the generic graph) otherwise."""
    return "megatron-lm" if framework.strip().startswith("Megatron-LM") else ""


# Megatron-LM's pipeline stages before Megatron-Core synchronise the device after every stage exchange:
# ``megatron/p2p_communication.py`` ``_communicate`` calls ``torch.cuda.synchronize()`` after
# ``batch_isend_irecv`` unconditionally ("To protect against race condition when using batch_isend_irecv()"),
# added with the scatter/gather of the sent tensors (NVIDIA/Megatron-LM 27fc468964, 2021-02-09) and still there at
# 06fc51cef5 (2022-02-18) and 841f789f48 (2022-05-19), the commits the rows cite: ``ParallelPlan.p2p_host_sync``
# for every Megatron-LM row with pipeline stages (:func:`_predict_row`).


#: the phrase of a row's notes stating that its stack launched kernels one by one (the one
#: simulator.calibration.predict.run_options reads for the single-device rows)
_NO_GRAPHS = re.compile(r"\bno CUDA graphs\b")
_SERVING = ("TensorRT", "FasterTransformer", "vLLM", "SGLang", "DeepSpeed", "TGI", "text-generation-inference")
_INFER_METRICS = ("tpot_s", "ttft_s", "latency_s", "tokens_per_s", "tokens_per_s_per_device")


def _predict_inference(r: dict[str, str], base: MultiRow, skip: Any) -> MultiRow:
    from dataclasses import replace as dc_replace

    from simulator.calibration.predict import run_options
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan, generate_request
    from workloads.parallel import ParallelPlan

    if r["metric"] not in _INFER_METRICS:
        return skip(f"metric {r['metric']!r}: not compared yet")
    batch, tp, il, ol = (_int(r[k]) for k in ("batch", "tp", "input_len", "output_len"))
    missing = [k for k, v in (("batch", batch), ("tp", tp), ("input_len", il), ("output_len", ol)) if v is None]
    if missing:
        return skip("inference: " + ", ".join(missing) + " not stated (a serving run at a batch the runtime chose)")
    quant, why = _serving_precision(r)
    if why:
        return skip(why)
    act = r["dtype"] if not quant else "fp16"  # TensorRT-LLM's fp8 engines: "FP16 elsewhere"
    system, why = _model_and_system(r)
    if why:
        return skip(why)
    pp = _int(r["pp"]) or 1
    dp = _int(r["dp"]) or 1
    ft = "FasterTransformer" in r["framework"]
    limit = _ft_context_tokens(r["notes"], r["id"]) if ft else None
    if ft and limit is None and pp > 1:
        from simulator.calibration.measurements import MeasurementError

        raise MeasurementError(f"row {r['id']!r}: pp: got {pp}; expected 1 for FasterTransformer "
                               f"{_ft_release(r['notes'])} (no pipelined context phase recorded)")
    text = f"{r['source']} {r['notes']} {r['framework']}"
    opts, overrides = run_options({"source": text, "notes": "", "metric_reported": "", "dtype": act,
                                   "framework": r["framework"]})
    if any(s.lower() in text.lower() for s in _SERVING):
        # (run_options took epilogue_fusion from the same text: simulator.calibration.predict.gemm_epilogues);
        # CUDA graphs unless the notes say the kernels were launched one by one (FasterTransformer's host
        # loop, TensorRT-LLM's gptSessionBenchmark without --enable_cuda_graph)
        opts = dc_replace(opts, fusion=True, cuda_graphs=not _NO_GRAPHS.search(text), eager_framework=False)
    hw = load_hardware(system)
    if overrides:
        from hwmodels.spec import replace_path

        for path, value in overrides.items():
            hw = replace_path(hw, f"device.{path}" if hasattr(hw, "device") else path, value)
    plan = ParallelPlan(tp=tp, pp=pp, dp=dp)
    phase = r["phase"]
    if phase == "decode":
        res = evaluate_plan(r["model"], hw, plan, opts, phase="decode", context=il, batch=batch, dtype=act, **quant)
        pred = {"tpot_s": res.latency_s, "latency_s": res.latency_s, "tokens_per_s": batch * dp / res.latency_s}
    elif phase == "prefill":
        res = evaluate_plan(r["model"], hw, plan, opts, phase="prefill", seq=il, batch=batch, dtype=act, **quant,
                            **_engine_build(r))
        pred = {"ttft_s": res.latency_s, "latency_s": res.latency_s, "tokens_per_s": batch * dp * il / res.latency_s}
    else:
        res = generate_request(r["model"], hw, plan, opts, input_len=il, output_len=ol, batch=batch, dtype=act,
                               **quant)
        x = _built_context(r, res, lambda **build: evaluate_plan(r["model"], hw, plan, opts, phase="prefill", seq=il,
                                                                 batch=batch, dtype=act, **quant, **build))
        mb = _ft_context_microbatch(batch, il, pp, limit) if limit is not None else batch
        if mb < batch:  # the context phase in pipelined microbatches, as FasterTransformer runs it
            x["ttft_s"] = _pipelined_prefill(evaluate_plan(r["model"], hw, plan, opts, phase="prefill", seq=il,
                                                           batch=mb, dtype=act, **quant), batch // mb)
            x["e2e_latency_s"] = res.extra["e2e_latency_s"] - res.extra["ttft_s"] + x["ttft_s"]
        if ft and _ft_release(r["notes"], r["id"]) in _FT_LAST_INPUT_REDECODED and il > 1:
            # the release's generation loop runs the last input token through every layer again (output_len
            # decoder passes after a context pass that yields no token): the step over il - 1 cached tokens,
            # which yields the first token (so it is in the time to the first token as in the whole request)
            step = evaluate_plan(r["model"], hw, plan, opts, phase="decode", context=il - 1, batch=batch,
                                 dtype=act, **quant).latency_s
            x["ttft_s"] += step
            x["e2e_latency_s"] += step
        e2e = x["e2e_latency_s"]
        out_only = "output" in r["unit"].lower() and "input" not in r["unit"].lower()
        pred = {"ttft_s": x["ttft_s"], "tpot_s": x["tpot_s"], "latency_s": e2e,
                "tokens_per_s": batch * dp * (ol if out_only else il + ol) / e2e}
        pred["tokens_per_s_per_device"] = pred["tokens_per_s"] / plan.devices
    if r["metric"] not in pred:
        return skip(f"metric {r['metric']!r} for phase {phase!r}: not compared")
    return MultiRow(base.id, base.category, base.model, system, base.metric, base.measured,
                    predicted=pred[r["metric"]])


def _built_context(r: dict[str, str], res: Any, prefill: Any) -> dict[str, float]:
    """``res.extra`` of a whole request with its context pass rerun by ``prefill(**switches)`` under the engine-build
    switches the row's notes state (:func:`_engine_build`); the decode steps are unchanged."""
    x = dict(res.extra)
    build = _engine_build(r)
    if build:
        pre = prefill(**build).latency_s
        x["e2e_latency_s"] += pre - x["ttft_s"]
        x["ttft_s"] = pre
    return x


def _engine_build(r: dict[str, str]) -> dict[str, Any]:
    """``evaluate_plan``'s engine-build switches for a prompt pass (a prefill row's, or a whole request's context
    pass), each where the row's notes state it (the
    single-device rows' phrases, :mod:`simulator.calibration.predict`): "GEMM tactics timed at N tokens"
    (``gemm_tactic_tokens``: a TensorRT-LLM v0.5 engine built without the GEMM plugin, whose context profile's opt
    shape is ``(max_input_len * max_batch_size + 1) // 2`` tokens of the build's stated flags,
    :data:`workloads.frameworks.TRTLLM_V05_TACTIC_PROFILE`) and "the gate and up projections as two GEMMs"
    (``split_gate_up``: built without ``--use_fused_mlp``, :data:`workloads.frameworks.TRTLLM_V05_UNFUSED_MLP`);
    {} otherwise."""
    from simulator.calibration.predict import gated_mlp_unfused, gemm_tactic_tokens

    tokens = gemm_tactic_tokens(r["notes"])
    out: dict[str, Any] = {"gemm_tactic_tokens": tokens} if tokens else {}
    if gated_mlp_unfused(r["notes"]):
        out["split_gate_up"] = True
    return out


#: what a row's notes state its fp8 engine quantised, as the TensorRT-LLM documents that published the rows build
#: them: v0.6.1's ``performance.md`` builds with ``--enable_fp8 --fp8_kv_cache`` (fp8 GEMMs, fp8 KV cache, fp16
#: elsewhere); v0.9.0's ``perf-overview.md`` writes ``"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo":
#: "FP8"}`` into each checkpoint config. Either phrase: linear-layer weights and KV cache in fp8 (e4m3), the
#: rest fp16 (:func:`workloads.precision.apply_precision`).
_FP8_WEIGHTS_AND_KV = re.compile(r"--enable_fp8 --fp8_kv_cache|quant_algo FP8 and kv_cache_quant_algo FP8")


def _serving_precision(r: dict[str, str]) -> tuple[dict[str, str], str]:
    """(the ``weight_dtype`` / ``kv_dtype`` of a row's engine, or why the row cannot be predicted): 16-bit rows
    none; an fp8 row the fp8 weights and KV cache its notes state (:data:`_FP8_WEIGHTS_AND_KV`); an fp8 row whose
    source does not say what was quantised is not predicted."""
    if r["dtype"] in ("bf16", "fp16"):
        return {}, ""
    if r["dtype"] == "fp8" and _FP8_WEIGHTS_AND_KV.search(r["notes"]):
        return {"weight_dtype": "fp8", "kv_dtype": "fp8"}, ""
    if r["dtype"] == "fp8":
        return {}, "dtype 'fp8': the source does not state what was quantised (weights, KV cache)"
    return {}, f"dtype {r['dtype']!r}: quantised serving of that dtype not modelled"


#: ``getLocalBatchSize``'s limit on the tokens of one context microbatch, by the FasterTransformer release
#: that first published a row's table (``src/fastertransformer/utils/nccl_utils.cc``: 2048 in the v5.0 beta
#: @ 952a1f2449f6bdd921feaba7cea68ae95d0d426b, 8192 in v5.0 @ a44c38134cefe17a81c269b6ec23d91cfe4e7216,
#: 1024 from v5.1 @ bc214067d603bf95beb8af5d1ce5960e96ba7244 through df4a7534860137e060e18d2ebf019906120ea204,
#: the last release v5.3 included); a row's notes name the release ("first published with FasterTransformer
#: v5.0", "... v5.0 beta"); unnamed: the latest. v4.0 (``None``) has no pipelined context phase: a row of it
#: with pipeline stages is refused.
_FT_CONTEXT_TOKENS: dict[str, int | None] = {"v4.0": None, "v5.0 beta": 2048, "v5.0": 8192, "v5.1": 1024,
                                             "v5.1.1": 1024, "v5.2": 1024, "v5.2.1": 1024, "v5.3": 1024}
_FT_RELEASE = re.compile(r"first published with FasterTransformer (v\d+(?:\.\d+)+(?: beta)?)")
#: releases whose GPT generation loop starts at the last input token: v4.0's ``DecodingGpt::forward``
#: (``fastertransformer/gpt.h`` @ 0280a66dc62bd8ff1ce21c9c2cd0029799829eaa) embeds ``output_ids[step - 1]`` and
#: runs every layer for each step from ``input_len`` to ``input_len + output_len - 1``, after a context pass
#: (``forward_context``) that fills the K/V cache of all ``input_len`` tokens and computes no logits; v5.0 on
#: (``ParallelGpt::forward`` @ a44c381) takes the first token from the context decoder's output instead
_FT_LAST_INPUT_REDECODED = frozenset({"v4.0"})


def _ft_release(notes: str, row: str = "") -> str:
    """The FasterTransformer release a row's notes say first published its table ("" when none is named); a
    release without a recorded rule is a located MeasurementError naming the row."""
    m = _FT_RELEASE.search(notes)
    if not m:
        return ""
    if m.group(1) not in _FT_CONTEXT_TOKENS:
        from nodeperf.suggest import did_you_mean
        from simulator.calibration.measurements import MeasurementError

        raise MeasurementError(f"row {row!r}: notes: FasterTransformer release; got {m.group(1)!r}; expected one of "
                               f"{', '.join(_FT_CONTEXT_TOKENS)}{did_you_mean(m.group(1), _FT_CONTEXT_TOKENS)}")
    return m.group(1)


def _ft_context_tokens(notes: str, row: str = "") -> int | None:
    """The context-microbatch token limit of the FasterTransformer release a row's notes name (1024 when
    they name none, the rule of every release from v5.1 on; None: the release pipelines no context phase)."""
    rel = _ft_release(notes, row)
    return _FT_CONTEXT_TOKENS[rel] if rel else 1024


def _ft_context_microbatch(batch: int, seq: int, pp: int, max_tokens: int = 1024) -> int:
    """The microbatch FasterTransformer's GPT runs its context phase in: ``getLocalBatchSize(batch, seq, pp)``
    (``src/fastertransformer/utils/nccl_utils.cc``, called by ``ParallelGptContextDecoder::forward``, NVIDIA/
    FasterTransformer @ df4a7534860137e060e18d2ebf019906120ea204): the whole batch without pipeline
    parallelism; otherwise the batch divided by ``pp`` when it divides, then halved while the microbatch times
    the length exceeds ``max_tokens`` (the release's limit, :data:`_FT_CONTEXT_TOKENS`) and the microbatch is
    even. (Generation steps call it with length 1.)"""
    if pp == 1:
        return batch
    mb = batch // pp if batch % pp == 0 else batch
    while mb * seq > max_tokens and mb % 2 == 0:
        mb //= 2
    return mb


def _pipelined_prefill(res: Any, microbatches: int) -> float:
    """Latency of ``microbatches`` equal microbatches through the stages of one microbatch's prefill
    ``res`` (each stage loops over the microbatches and hands each on as it finishes,
    ``ParallelGptContextDecoder::forward``): the first microbatch through every stage, then the slowest
    stage once per further microbatch."""
    f = [s.forward_s for s in res.stages]
    return sum(f) + (microbatches - 1) * max(f)


def validate_multi(path: str | Path | None = None, *, progress: bool | None = None) -> list[MultiRow]:
    """Every row of the multi-device dataset: predicted (nothing fitted) or skipped with the reason.

    ``progress``: a bar per row on standard error (None: see :func:`simulator.report.progress.progress_enabled`).
    """
    from simulator.report.progress import track

    p = Path(path) if path is not None else DEFAULT_MULTI_DATASET
    with open(p, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    from simulator.calibration.measurements import MeasurementError

    try:
        return [_predict_row(r) for r in track(rows, desc="multi-device rows", unit="row", enabled=progress)]
    except MeasurementError as e:  # a row's located problem, in its file
        raise MeasurementError(f"{p.name}: {e}") from None


def multi_summary(rows: list[MultiRow]) -> dict[str, Any]:
    """MAPE, bias, count and worst rows of the predicted rows, plus the collectives group."""
    import math

    from hwmodels.collectives import compare_published

    done = [r for r in rows if r.predicted is not None]
    out: dict[str, Any] = {"rows": len(rows), "predicted": len(done), "skipped": len(rows) - len(done)}
    for group, cat in (("training", "train"), ("inference", "inference")):
        sel = [r for r in done if r.category == cat]
        if not sel:
            continue
        apes = [r.ape for r in sel]
        out[group] = {
            "n": len(sel), "mape": sum(apes) / len(apes),
            "bias": 100.0 * (math.exp(sum(math.log(r.predicted / r.measured) for r in sel) / len(sel)) - 1.0),
            "worst": [{"id": r.id, "model": r.model, "system": r.system, "metric": r.metric, "measured": r.measured,
                       "predicted": r.predicted, "error_pct": r.signed_error}
                      for r in sorted(sel, key=lambda r: -r.ape)[:3]],
        }
    comps = [c for c in compare_published() if c.in_score]
    out["collectives"] = collectives_summary(comps)
    reasons: dict[str, int] = {}
    for r in rows:
        if r.skipped:
            reasons[r.skipped] = reasons.get(r.skipped, 0) + 1
    out["skipped_reasons"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return out


#: Size bands of the collectives summary (nccl-tests size, bytes): latency-bound, mid, bandwidth-bound.
COLLECTIVE_BANDS = (("latency (<1 MiB)", 0.0, 2.0**20), ("mid (1-256 MiB)", 2.0**20, 2.0**28),
                    ("bandwidth (>=256 MiB)", 2.0**28, float("inf")))


def collectives_summary(comps: list[Any], worst: int = 5) -> dict[str, Any]:
    """MAPE and bias of predicted bus bandwidth against published nccl-tests / rccl-tests rows
    (:func:`hwmodels.collectives.compare_published`), overall, per size band and per collective,
    with the ``worst`` rows. Bias is the geometric-mean ratio predicted / measured minus one, in %."""
    import math

    def stats(sel: list[Any]) -> dict[str, Any]:
        if not sel:
            return {"n": 0, "mape": float("nan"), "bias": float("nan")}
        return {"n": len(sel), "mape": 100.0 * sum(abs(c.error) for c in sel) / len(sel),
                "bias": 100.0 * (math.exp(sum(math.log1p(c.error) for c in sel) / len(sel)) - 1.0)}

    out = stats(comps)
    out["bands"] = {name: stats([c for c in comps if lo <= c.size_bytes < hi]) for name, lo, hi in COLLECTIVE_BANDS}
    out["by_collective"] = {k: stats([c for c in comps if c.collective == k])
                            for k in sorted({c.collective for c in comps})}
    # system x band, and system x collective x band (the figures docs/collectives.md tabulates)
    band_of = {c.id: next(name for name, lo, hi in COLLECTIVE_BANDS if lo <= c.size_bytes < hi) for c in comps}
    out["by_system_band"] = {f"{s} {b}": stats([c for c in comps if c.system == s and band_of[c.id] == b])
                             for s in sorted({c.system for c in comps}) for b, _, _ in COLLECTIVE_BANDS
                             if any(c.system == s and band_of[c.id] == b for c in comps)}
    out["by_group_band"] = {f"{g} {b}": stats([c for c in comps if c.group == g and band_of[c.id] == b])
                            for g in sorted({c.group for c in comps}) for b, _, _ in COLLECTIVE_BANDS
                            if any(c.group == g and band_of[c.id] == b for c in comps)}
    out["worst"] = [{"id": c.id, "group": c.group, "size_bytes": c.size_bytes, "error_pct": 100.0 * c.error,
                     "algorithm": c.predicted_algorithm, "protocol": c.predicted_protocol}
                    for c in sorted(comps, key=lambda c: -abs(c.error))[:worst]]
    return out

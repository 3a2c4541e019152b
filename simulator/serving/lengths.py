"""Prompt and output lengths of requests: fixed, uniform, lognormal, named data-set summaries, or a file.

Specs (``--lengths``):

* ``fixed:in=I,out=O``;
* ``uniform:in=A-B,out=C-D`` (integers, both ends included);
* ``lognormal:in_mean=M,in_sigma=S,out_mean=M,out_sigma=S``: lognormal lengths with the given mean
  (tokens) and log-space sigma, clipped to ``[1, in_max]`` / ``[1, out_max]`` when those are given;
* a name of :data:`LENGTH_DATASETS` (a published summary of a public data set, with its source);
* ``FILE.csv`` with ``input_len, output_len`` columns, rows drawn with replacement.

Every spec may end with ``prefix=P``: the first P tokens of every prompt are one shared system prompt
(what ``--prefix-cache`` can reuse); P must be smaller than every prompt.
"""

from __future__ import annotations

import csv
import functools
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nodeperf.suggest import did_you_mean, short_text
from simulator.serving.arrivals import parse_params, positive_integer, positive_number
from simulator.serving.config import ServingError

__all__ = ["LengthSpec", "parse_lengths", "sample_lengths", "LENGTH_DATASETS", "LENGTH_KINDS"]

LENGTH_KINDS = ("fixed", "uniform", "lognormal")

#: Log-space sigma of a lognormal whose coefficient of variation is 1 (the CV of an exponential):
#: sqrt(ln(1 + CV^2)) = sqrt(ln 2).
_SIGMA_CV1 = math.sqrt(math.log(2.0))


def _azure_2023(in_mean: float, in_median: float, in_max: float, out_mean: float, out_median: float,
                out_max: float) -> dict[str, float]:
    """Lognormal parameters of an Azure 2023 trace summary: each side's mean and the log-space sigma that puts
    the lognormal's median at the trace's (``mean = median * exp(sigma^2 / 2)``); the trace's longest prompt and
    output bound the pairs (dropped and redrawn past them: ``total_max`` their sum, never the binding bound)."""
    return {"in_mean": in_mean, "in_sigma": math.sqrt(2.0 * math.log(in_mean / in_median)), "in_max": in_max,
            "out_mean": out_mean, "out_sigma": math.sqrt(2.0 * math.log(out_mean / out_median)), "out_max": out_max,
            "total_max": in_max + out_max, "min_len": 1.0}


#: Named length distributions: name -> (lognormal parameters, source). Only summaries read from their
#: source are listed; a trace file (``--arrival trace:FILE.csv`` or ``--lengths FILE.csv``) gives any
#: other data set exactly. Which statistic each parameter comes from:
#:
#: ``sharegpt`` -- ShareGPT (ShareGPT_V3_unfiltered_cleaned_split.json) as ``sglang.bench_serving`` and
#: vLLM's ``benchmark_serving.py --dataset-name sharegpt`` sample it (first human turn as the prompt, the
#: dataset's reply length as the output; pairs with prompt or output < 4 tokens dropped, prompt > 1024 or
#: prompt + output > 2048 dropped):
#:
#: * ``in_mean`` 224.2 = 269,081 input tokens / 1200 prompts and ``out_mean`` 189.1 = 226,901 output tokens /
#:   1200 prompts: the totals printed by ``sglang.bench_serving --dataset-name sharegpt --num-prompts 1200
#:   --request-rate 4`` (Llama 3.1 8B tokenizer) in sgl-project/sglang issue #2097
#:   (https://github.com/sgl-project/sglang/issues/2097), the command of the published rows srv-001..004;
#: * ``in_max`` 1024, ``total_max`` 2048 and ``min_len`` 4: the benchmark's filter (vllm
#:   benchmarks/benchmark_serving.py ``sample_sharegpt_requests`` and benchmark_throughput.py ``sample_requests``;
#:   sglang bench_serving.py ``sample_sharegpt_requests``: ``if prompt_len < 4 or output_len < 4: continue`` and
#:   ``if prompt_len > 1024 or prompt_len + output_len > 2048: continue``), applied as the benchmark applies it:
#:   a pair outside it is dropped and another drawn in its place (:func:`sample_lengths`), not clipped to the
#:   bound; ``out_max`` 2044 (2048 less the 4-token minimum prompt) is the longest output the filter lets pass;
#: * ``in_sigma`` = ``out_sigma`` = sqrt(ln 2) = 0.833 (coefficient of variation 1): the source gives totals
#:   only, no spread. A CV of 1 is the exponential's, the shape ServeGen (Alibaba, arXiv 2025; summary in AI-Infra-Team/awesome-papers issue #138)
#:   reports for production output lengths; the prompt spread is taken equal for want of a ShareGPT
#:   figure. Stated, not fitted: no serving measurement chose it. No published standard deviation,
#:   percentile or fitted shape of ShareGPT V3 as these benchmarks sample it (first turn pair, Llama
#:   tokenizer, their filter) was found (benchmark docs, vLLM / SGLang / AIPerf issues and docs, serving
#:   papers; the published runs print totals only), so the spread stays an assumption (docs/serving.md).
#:
#: The benchmarks' own sample is deterministic: ``random.seed(args.seed)`` (vLLM ``--seed`` default 0,
#: SGLang 1), ``random.shuffle`` of every conversation's first pair, then the first ``--num-prompts`` pairs
#: that pass the filter (vllm benchmarks/benchmark_throughput.py ``sample_requests`` @ 018efff,
#: benchmark_serving.py ``sample_sharegpt_requests`` of the same period): a fixed set of prompts per data
#: file and tokenizer, not a fresh draw. Its lengths are not published; ``--lengths FILE.csv`` takes them
#: exactly where the data set can be read.
#:
#: ``azure-code-2023`` and ``azure-conv-2023`` -- the Azure LLM inference trace 2023 (Azure/AzurePublicDataset
#: ``data/AzureLLMInferenceTrace_code.csv``, 8,819 requests, and ``..._conv.csv``, 19,366 requests, @ 7909210; the
#: data of Patel et al., "Splitwise", ISCA 2024, per the trace's ``AzureLLMInferenceDataset2023.md``), columns
#: ``ContextTokens`` (prompt) and ``GeneratedTokens`` (output). Stated, computed over every row of the files:
#:
#: * code: prompt mean 2047.8, median 1469, p90 5188, p99 7436, max 7437; output mean 27.9, median 13, p90 55,
#:   p99 251, max 1899;
#: * conversation: prompt mean 1154.7, median 1020, p90 2734, p99 4142, max 14050; output mean 211.1, median 129,
#:   p90 424, p99 601, max 1000 (the medians are the ones Splitwise quotes: coding 1500 / 13, conversation
#:   1020 / 129 tokens).
#:
#: Assumed: each side lognormal, independent of the other, with the trace's median and mean (log-space sigma
#: ``sqrt(2 ln(mean / median))``: code 0.815 in / 1.236 out, conversation 0.498 / 0.992), a pair past the trace's
#: longest prompt or output dropped and redrawn as for ``sharegpt`` (``in_max``, ``out_max``; the log-space means
#: are moved so the kept pairs keep the trace's means, :func:`_unfiltered_mus`, which moves the medians: 200,000
#: draws at seed 0 give medians code 1623 in (trace 1469) / 13 out (13), conversation 1019 (1020) / 148 (129)).
#: The percentiles are not matched: p90 code 4195 in (trace 5188) / 63 out (55), conversation 1930 (2734) / 478
#: (424) (docs/serving.md). ``--lengths FILE.csv`` of the trace's two columns renamed takes the rows themselves.
LENGTH_DATASETS: dict[str, tuple[dict[str, float], str]] = {
    "sharegpt": (
        {"in_mean": 269081 / 1200, "in_sigma": _SIGMA_CV1, "in_max": 1024.0,
         "out_mean": 226901 / 1200, "out_sigma": _SIGMA_CV1, "out_max": 2044.0, "total_max": 2048.0, "min_len": 4.0},
        "ShareGPT as sampled by sglang.bench_serving / vllm benchmark_serving.py (--dataset-name sharegpt): "
        "means 224.2 in / 189.1 out tokens from the 1200-prompt totals (269,081 / 226,901) printed in "
        "https://github.com/sgl-project/sglang/issues/2097; the benchmark's filter (pairs with a prompt over 1024, "
        "prompt + output over 2048 or either under 4 tokens dropped and redrawn); "
        "lognormal sigma sqrt(ln 2) (CV 1, the exponential spread ServeGen (arXiv 2025) reports for output lengths), "
        "not from ShareGPT: no published ShareGPT spread as the benchmarks sample it was found"),
    "azure-code-2023": (_azure_2023(2047.8, 1469.0, 7437.0, 27.9, 13.0, 1899.0),
                        "Azure LLM inference trace 2023, code (Azure/AzurePublicDataset data/AzureLLMInferenceTrace_code.csv, "
                        "8,819 requests; Splitwise, ISCA 2024): prompt mean 2047.8 / median 1469 / max 7437, output "
                        "mean 27.9 / median 13 / max 1899 tokens from the trace's rows; lognormal through each mean "
                        "and median (assumed shape), pairs past the maxima redrawn"),
    "azure-conv-2023": (_azure_2023(1154.7, 1020.0, 14050.0, 211.1, 129.0, 1000.0),
                        "Azure LLM inference trace 2023, conversation (Azure/AzurePublicDataset "
                        "data/AzureLLMInferenceTrace_conv.csv, 19,366 requests; Splitwise, ISCA 2024): prompt mean "
                        "1154.7 / median 1020 / max 14050, output mean 211.1 / median 129 / max 1000 tokens from the "
                        "trace's rows; lognormal through each mean and median (assumed shape), pairs past the maxima "
                        "redrawn"),
}


@dataclass(frozen=True)
class LengthSpec:
    """A parsed ``--lengths`` spec."""

    kind: str
    params: tuple[tuple[str, float], ...] = ()
    prefix: int = 0
    path: str = ""
    source: str = ""

    def get(self, key: str, default: float = 0.0) -> float:
        return dict(self.params).get(key, default)


def _range(text: str, where: str) -> tuple[int, int]:
    lo, sep, hi = text.partition("-")
    if not sep:
        v = positive_integer(text, where)
        return v, v
    a, b = positive_integer(lo.strip(), where), positive_integer(hi.strip(), where)
    if a > b:
        raise ServingError(f"{where}: empty range; got {text!r}; expected LOW-HIGH with LOW <= HIGH")
    return a, b


def parse_lengths(text: str, where: str = "--lengths") -> LengthSpec:
    """Parse a length spec (see the module docstring); :class:`ServingError` on a bad one."""
    text = str(text).strip()
    kind, sep, rest = text.partition(":")
    kind = kind.strip()
    if not sep and kind.lower().endswith(".csv"):
        return LengthSpec("file", path=kind)
    if kind.lower().endswith(".csv"):
        p = parse_params(rest, where, ("prefix",))
        return LengthSpec("file", path=kind, prefix=positive_integer(p["prefix"], f"{where}: prefix"))
    low = kind.lower()
    if low in LENGTH_DATASETS:
        params, source = LENGTH_DATASETS[low]
        p = parse_params(rest, where, ("prefix",)) if rest.strip() else {}
        prefix = positive_integer(p["prefix"], f"{where}: prefix") if "prefix" in p else 0
        return _with_prefix_room(LengthSpec("lognormal", tuple(sorted(params.items())), prefix=prefix, source=source),
                                 f"{where}: {low}")
    if low not in LENGTH_KINDS:
        names = (*LENGTH_KINDS, *LENGTH_DATASETS)
        raise ServingError(f"{where}: unknown length distribution {kind!r}; got {text!r}; expected fixed:in=I,out=O, "
                           f"uniform:in=A-B,out=C-D, lognormal:in_mean=..,in_sigma=..,out_mean=..,out_sigma=.., "
                           f"a data-set name or FILE.csv{did_you_mean(low, names)}")
    allowed = {"fixed": ("in", "out", "prefix"), "uniform": ("in", "out", "prefix"),
               "lognormal": ("in_mean", "in_sigma", "out_mean", "out_sigma", "in_max", "out_max", "prefix")}[low]
    p = parse_params(rest, where, allowed)
    need = [k for k in allowed if k not in p and k not in ("prefix", "in_max", "out_max")]
    if need:
        raise ServingError(f"{where}: {low} needs {', '.join(need)}; got {text!r}; expected e.g. "
                           + {"fixed": "fixed:in=512,out=128", "uniform": "uniform:in=100-1000,out=50-300",
                              "lognormal": "lognormal:in_mean=600,in_sigma=0.8,out_mean=200,out_sigma=0.7"}[low])
    prefix = positive_integer(p.pop("prefix"), f"{where}: prefix") if "prefix" in p else 0
    vals: dict[str, float] = {}
    for k, v in p.items():
        if low == "uniform":
            a, b = _range(v, f"{where}: {k}")
            vals[f"{k}_lo"], vals[f"{k}_hi"] = float(a), float(b)
        elif k.endswith("sigma"):
            s = float(v) if _is_float(v) else -1.0
            if not math.isfinite(s) or s < 0:
                raise ServingError(f"{where}: {k}: got {v!r}; expected a number >= 0")
            vals[k] = s
        elif low == "lognormal" and k.endswith("mean"):
            vals[k] = positive_number(v, f"{where}: {k}")
        else:
            vals[k] = float(positive_integer(v, f"{where}: {k}"))
    spec = LengthSpec(low, tuple(sorted(vals.items())), prefix=prefix)
    shortest = spec.get("in", spec.get("in_lo", 2))
    if prefix and low != "lognormal" and prefix >= shortest:
        raise ServingError(f"{where}: prefix: got {prefix}; expected fewer tokens than the shortest prompt ({int(shortest)})")
    return _with_prefix_room(spec, where) if low == "lognormal" else spec


def _with_prefix_room(spec: LengthSpec, where: str) -> LengthSpec:
    """``spec``, once its shared prefix leaves room for a prompt of the prefix and one more token under the
    prompt cap (``in_max``) and, with the shortest output (``min_len``), under ``total_max``: every prompt is
    raised to ``prefix + 1`` tokens, so a longer prefix would put every pair outside the filter."""
    caps = [c for c in (spec.get("in_max"), spec.get("total_max") - spec.get("min_len", 1.0)) if c > 0]
    if spec.prefix and caps and spec.prefix + 1 > min(caps):
        raise ServingError(f"{where}: prefix: got {spec.prefix}; expected fewer than {int(min(caps))} tokens: a "
                           f"prompt holds the prefix and at least one more token, at most {int(min(caps))} "
                           f"under the length filter {_filter_text(spec)}")
    return spec


def _is_float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _read_lengths_file(path: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    from nodeperf.files import read_csv_text

    text = read_csv_text(path, what="a CSV file with the columns input_len, output_len", error=ServingError)
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(h.strip() for h in rows[0]):
        raise ServingError(f"{path}:1: empty file; got no header; expected columns input_len, output_len")
    cols = [h.strip() for h in rows[0]]
    if "input_len" not in cols or "output_len" not in cols:
        raise ServingError(f"{path}:1: missing columns; got {short_text(', '.join(cols))}; expected input_len, output_len")
    i, o = cols.index("input_len"), cols.index("output_len")
    ins, outs = [], []
    for line, row in enumerate(rows[1:], start=2):
        if not any(x.strip() for x in row):
            continue
        if len(row) < len(cols):
            raise ServingError(f"{path}:{line}: {len(row)} fields; got {row!r}; expected {len(cols)}")
        ins.append(positive_integer(row[i].strip(), f"{path}:{line}: input_len"))
        outs.append(positive_integer(row[o].strip(), f"{path}:{line}: output_len"))
    if not ins:
        raise ServingError(f"{path}:2: no rows; got a header only; expected input_len, output_len rows")
    return np.asarray(ins, dtype=np.int64), np.asarray(outs, dtype=np.int64)


def sample_lengths(spec: LengthSpec, n: int, rng: np.random.Generator, where: str = "--lengths"
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (input_len, output_len) pairs (int64 arrays) drawn from ``spec``."""
    if spec.kind == "fixed":
        return np.full(n, int(spec.get("in")), np.int64), np.full(n, int(spec.get("out")), np.int64)
    if spec.kind == "uniform":
        ins = rng.integers(int(spec.get("in_lo")), int(spec.get("in_hi")) + 1, n)
        outs = rng.integers(int(spec.get("out_lo")), int(spec.get("out_hi")) + 1, n)
        return ins.astype(np.int64), outs.astype(np.int64)
    if spec.kind == "lognormal" and spec.get("total_max", 0.0) > 0:
        return _filtered_pairs(spec, n, rng, where)
    if spec.kind == "lognormal":
        out = []
        for side in ("in", "out"):
            mean, sigma = spec.get(f"{side}_mean"), spec.get(f"{side}_sigma")
            mu = math.log(mean) - sigma * sigma / 2.0  # the lognormal whose mean is `mean`
            x = np.rint(rng.lognormal(mu, sigma, n))
            hi = spec.get(f"{side}_max", 0.0)
            out.append(np.clip(x, 1, hi if hi > 0 else None).astype(np.int64))
        ins = out[0]
        if spec.prefix:
            ins = np.maximum(ins, spec.prefix + 1)
        return ins, out[1]
    ins, outs = _read_lengths_file(spec.path, where)
    if spec.prefix and int(ins.min()) <= spec.prefix:
        raise ServingError(f"{where}: prefix: got {spec.prefix}; expected fewer tokens than the shortest prompt "
                           f"of {spec.path} ({int(ins.min())})")
    pick = rng.integers(0, len(ins), n)
    return ins[pick], outs[pick]


def _filter_mask(spec: LengthSpec, i: np.ndarray, o: np.ndarray) -> np.ndarray:
    """True where an (input, output) pair passes the data set's filter (``min_len``, ``in_max``, ``out_max``,
    ``total_max``; see :func:`_filtered_pairs`)."""
    lo, in_hi, out_hi = spec.get("min_len", 1.0), spec.get("in_max", 0.0), spec.get("out_max", 0.0)
    keep = (i >= lo) & (o >= lo) & (i + o <= spec.get("total_max", 0.0))
    if in_hi > 0:
        keep &= i <= in_hi
    if out_hi > 0:
        keep &= o <= out_hi
    return keep


@functools.lru_cache(maxsize=8)
def _unfiltered_mus(spec: LengthSpec) -> tuple[float, float]:
    """Log-space means (mu_in, mu_out) of the lognormals whose pairs, once filtered, have the means ``in_mean``
    and ``out_mean`` (the summary's means are the filtered sample's: the totals a benchmark prints are of the
    pairs it kept). Fixed-point iteration on a 2-D quadrature of the two lognormals (continuous lengths)."""
    sig = (spec.get("in_sigma"), spec.get("out_sigma"))
    target = (spec.get("in_mean"), spec.get("out_mean"))
    mus = [math.log(m) - s * s / 2.0 for m, s in zip(target, sig, strict=True)]
    z = np.linspace(-7.0, 7.0, 701)
    w = np.exp(-z * z / 2.0)
    for _ in range(_MU_ITERATIONS):
        x_in, x_out = np.exp(mus[0] + sig[0] * z), np.exp(mus[1] + sig[1] * z)
        weight = np.outer(w, w) * _filter_mask(spec, x_in[:, None], x_out[None, :])
        total = float(weight.sum())
        if not total > 0:
            raise ServingError(f"lengths: the length filter {_filter_text(spec)} keeps no pair of the lognormals "
                               f"(means {target[0]:g} in / {target[1]:g} out); expected bounds the means fit inside")
        got = (float((weight * x_in[:, None]).sum() / total), float((weight * x_out[None, :]).sum() / total))
        step = [math.log(t / g) for t, g in zip(target, got, strict=True)]
        mus = [m + d for m, d in zip(mus, step, strict=True)]
        if max(abs(d) for d in step) < 1e-7:
            return mus[0], mus[1]
    raise ServingError(f"lengths: the means {target[0]:g} in / {target[1]:g} out under the length filter "
                       f"{_filter_text(spec)}: got no convergence after {_MU_ITERATIONS} iterations; expected means "
                       "the filtered lognormals can reach (well inside the bounds)")


#: Fixed-point iterations of :func:`_unfiltered_mus` before giving up.
_MU_ITERATIONS = 60


def _filter_text(spec: LengthSpec) -> str:
    lo, in_hi, out_hi, tot = (spec.get(k, d) for k, d in (("min_len", 1.0), ("in_max", 0.0), ("out_max", 0.0),
                                                             ("total_max", 0.0)))
    parts = [f"both >= {lo:g}"] + [f"in + out <= {tot:g}"] * (tot > 0) + [f"in <= {in_hi:g}"] * (in_hi > 0) \
        + [f"out <= {out_hi:g}"] * (out_hi > 0)
    return "(" + ", ".join(parts) + ")"


def _lognormal_pairs(spec: LengthSpec, n: int, rng: np.random.Generator,
                     mus: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rounded lognormal (input, output) draws of ``spec``: ``n`` prompts, then ``n`` outputs; ``mus``:
    the log-space means (default: those whose lognormals have the means ``in_mean`` / ``out_mean``)."""
    out = []
    for k, side in enumerate(("in", "out")):
        mean, sigma = spec.get(f"{side}_mean"), spec.get(f"{side}_sigma")
        mu = mus[k] if mus is not None else math.log(mean) - sigma * sigma / 2.0  # the lognormal of mean `mean`
        out.append(np.rint(rng.lognormal(mu, sigma, n)).astype(np.int64))
    return out[0], out[1]


#: Redraw rounds of :func:`_filtered_pairs` before giving up (each keeps the pairs that passed).
_MAX_REDRAWS = 1000


def _filtered_pairs(spec: LengthSpec, n: int, rng: np.random.Generator, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``n`` pairs drawn as a benchmark's data-set filter keeps them: a pair with a length under ``min_len``,
    a prompt over ``in_max``, an output over ``out_max`` or both over ``total_max`` is dropped and another pair
    drawn in its place (vLLM ``benchmark_serving.py`` / SGLang ``bench_serving.py`` ``sample_sharegpt_requests``
    skip such pairs and take the next). The first draw is :func:`_lognormal_pairs` of ``n``; only the
    dropped places are redrawn, in order, so the pairs that pass keep their values."""
    mus = _unfiltered_mus(spec)
    ins, outs = _lognormal_pairs(spec, n, rng, mus)
    for _ in range(_MAX_REDRAWS):
        idx = np.flatnonzero(~_filter_mask(spec, ins, outs))
        if idx.size == 0:
            if spec.prefix:
                ins = np.maximum(ins, spec.prefix + 1)
            return ins, outs
        ins[idx], outs[idx] = _lognormal_pairs(spec, idx.size, rng, mus)
    in_hi, total_hi, lo = spec.get("in_max", 0.0), spec.get("total_max", 0.0), spec.get("min_len", 1.0)
    raise ServingError(f"{where}: the length filter (in <= {in_hi:g}, in + out <= {total_hi:g}, both >= {lo:g}) "
                       f"drops nearly every draw; got {idx.size} of {n} still outside it after {_MAX_REDRAWS} "
                       f"redraws; expected means well inside the bounds")


def describe(spec: LengthSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": spec.kind, **{k: v for k, v in spec.params}}
    if spec.prefix:
        out["shared_prefix_tokens"] = spec.prefix
    if spec.path:
        out["file"] = spec.path
    if spec.source:
        out["source"] = spec.source
    return out

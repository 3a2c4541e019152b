"""`tune --ep LIST --cp LIST --microbatch LIST`: expert and context parallelism and the microbatch as axes of a
training-plan search. Which configurations exist is counted by hand from the plan's device rule (devices =
tp x pp x dp x cp; expert-parallel ranks are data-parallel ones); the searched metrics are `predict`'s for the same
plan; the rejections name the rule a candidate breaks."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.sweep.tune import TuneError, _valid_indices
from simulator.sweep.tune_model import ModelProblem, _auto_cp, _auto_ep
from workloads.zoo.transformer import zoo_config

MIXTRAL = ["mixtral-8x7b", "--hardware", "dgx-h100x2", "--train", "--seq", "1024", "--dtype", "bf16"]
LLAMA_128K = ["llama3-8b", "--hardware", "dgx-h100", "--train", "--seq", "131072", "--dtype", "bf16"]


def _valid(problem: ModelProblem) -> list[dict[str, object]]:
    return [problem.space.config(i) for i in _valid_indices(problem) or []]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def test_cp_multiplies_the_devices_and_ep_reuses_data_parallel_ranks() -> None:
    # 16 devices: (tp, dp, cp) exists when tp x dp x cp divides 16; ep adds none, so each such triple comes with
    # both ep values: tp 1: dp 4 (cp 1, 2, 4), dp 8 (cp 1, 2), dp 16 (cp 1); tp 2: dp 4 (cp 1, 2), dp 8 (cp 1)
    problem = ModelProblem("mixtral-8x7b", ["dgx-h100x2"], batch=(1,), dtypes=("bf16",), fusion=(True,),
                           train=True, recompute=("full",), tp=(1, 2), pp=(1,), dp=(4, 8, 16), ep=(1, 8),
                           cp=(1, 2, 4))
    got = sorted((c["tp"], c["dp"], c["cp"]) for c in _valid(problem) if c["ep"] == 8)
    assert got == [(1, 4, 1), (1, 4, 2), (1, 4, 4), (1, 8, 1), (1, 8, 2), (1, 16, 1), (2, 4, 1), (2, 4, 2),
                   (2, 8, 1)]
    assert len(_valid(problem)) == 2 * len(got)
    config = {"tp": 2, "pp": 1, "dp": 4, "ep": 4, "cp": 2, "batch": 2}
    assert problem._devices(config) == 16
    plan = problem._plan(config)
    assert (plan.tp, plan.dp, plan.ep, plan.cp, plan.microbatch, plan.global_batch, plan.devices) == \
        (2, 4, 4, 2, 2, 8, 16)


def test_auto_degrees_are_the_legal_divisors() -> None:
    mixtral, qwen, llama = (zoo_config(n) for n in ("mixtral-8x7b", "qwen3-30b-a3b", "llama3-8b"))
    assert _auto_ep(mixtral, 16) == (1, 2, 4, 8)  # the 8 experts' divisors
    assert _auto_ep(qwen, 16) == (1, 2, 4, 8, 16)  # 128 experts: up to the 16 devices
    assert _auto_ep(llama, 8) == (1,)  # dense
    assert _auto_cp(llama, 4096, 8) == (1, 2, 4, 8)
    assert _auto_cp(llama, 12, 8) == (1, 2)  # 12 = 2 x 2 x 3: cp 4 and 8 leave a ragged chunk
    assert _auto_cp(zoo_config("bert-base"), 512, 8) == (1,)  # context parallelism splits decoders
    problem = ModelProblem("mixtral-8x7b", ["dgx-h100"], batch=(1,), dtypes=("bf16",), train=True, tp=(1,),
                           pp=(1,), dp=(8,), ep="auto", cp="auto", seq=1024)
    axes = {a.name: a.values for a in problem.space.axes}
    assert axes["ep"] == (1, 2, 4, 8) and axes["cp"] == (1, 2, 4, 8)


def test_mixtral_search_picks_expert_parallelism_as_predict_ranks_it(capsys: pytest.CaptureFixture[str]) -> None:
    """dp 8 cannot hold Mixtral's states for any ep: 16 bytes a parameter (bf16 weight and gradient, fp32 master
    weight and two Adam moments) of its 46.70 B parameters over 8 ranks are 93.4 GB, over the 85.0 GB an H100
    lends. At dp 16 each candidate's throughput is `predict`'s for the same plan, and ep 8 (one expert a rank)
    is the best."""
    cfg = zoo_config("mixtral-8x7b")
    attn = cfg.d_model * cfg.heads * cfg.head_dim * 2 + 2 * cfg.d_model * cfg.kv_heads * cfg.head_dim
    params = cfg.layers * (attn + cfg.experts * 3 * cfg.d_model * cfg.d_ff + cfg.d_model * cfg.experts) \
        + 2 * cfg.vocab * cfg.d_model
    assert params == pytest.approx(46.70e9, rel=1e-3)
    rc, doc = _json(capsys, ["tune", *MIXTRAL, "--fusion", "on", "--recompute", "full", "--tp", "1", "--pp", "1",
                             "--dp", "8,16", "--ep", "1,2,8,16", "--microbatch", "1", "--sharding", "fsdp",
                             "--objective", "throughput", "--json", "--all-rejected"])
    assert rc == 0
    best = [(b["config"]["ep"], b["metrics"]["throughput_per_s"]) for b in doc["best"]]
    assert [ep for ep, _ in best] == [8, 2, 1] and best[0][0] > 1
    reasons = {(r["config"]["dp"], r["config"]["ep"]): r for r in doc["rejected"]}
    for ep in (1, 2, 8):
        r = reasons[(8, ep)]
        assert r["reason"].startswith("does not fit: needs ")
        assert r["metrics"]["memory_per_device"] >= 16 * params / 8 > r["metrics"]["capacity"]
    assert "ep 16 does not divide experts=8; expected a divisor (nearest: 8)" in reasons[(16, 16)]["reason"]
    assert doc["best"][0]["plan"]["ep"] == 8 and doc["best"][0]["plan"]["microbatch"] == 1
    for ep, throughput in best:
        rc, pred = _json(capsys, ["predict", *MIXTRAL, "--recompute", "full", "--dp", "16", "--ep", str(ep),
                                  "--microbatch", "1", "--fsdp", "--fusion", "--json"])
        assert rc == 0 and 16 / pred["latency_s"] == pytest.approx(throughput, rel=1e-12)


def test_context_parallelism_wins_at_128k_tokens_as_predict_ranks_it(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama 3 8B at 131072 tokens on 8 H100s: the searched plans' throughputs are `predict`'s, and the best splits
    the sequence (cp > 1)."""
    rc, doc = _json(capsys, ["tune", *LLAMA_128K, "--fusion", "on", "--recompute", "full", "--tp", "1,2,4,8",
                             "--pp", "1", "--dp", "1", "--cp", "auto", "--microbatch", "1", "--sharding", "none,zero1",
                             "--objective", "throughput", "--json", "--all-rejected"])
    assert rc == 0 and doc["space"]["axes"]["cp"] == [1, 2, 4, 8]
    assert doc["best"][0]["config"]["cp"] > 1 and doc["best"][0]["plan"]["devices"] == 8
    assert any(b["config"]["cp"] == 1 for b in doc["best"])  # tp 8 alone fits and ranks below
    for b in doc["best"]:
        c = b["config"]
        extra = ["--zero", "1"] if c["sharding"] == "zero1" else []
        rc, pred = _json(capsys, ["predict", *LLAMA_128K, "--recompute", "full", "--tp", str(c["tp"]), "--cp",
                                  str(c["cp"]), "--microbatch", "1", "--fusion", *extra, "--json"])
        assert rc == 0 and 1 / pred["latency_s"] == pytest.approx(b["metrics"]["throughput_per_s"], rel=1e-12)
    assert all(r["reason"].startswith("does not fit") for r in doc["rejected"])


def test_cp_that_does_not_split_the_sequence_is_rejected_with_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(capsys, ["tune", "gpt2", "--hardware", "dgx-h100", "--train", "--seq", "100", "--batch", "1",
                             "--dtype", "bf16", "--fusion", "on", "--recompute", "none", "--tp", "1", "--pp", "1",
                             "--dp", "1", "--cp", "1,2,4,8", "--json", "--all-rejected"])
    assert rc == 0 and sorted(b["config"]["cp"] for b in doc["best"]) == [1, 2]  # 100 = 2 x 2 x 25
    got = {r["config"]["cp"]: r["reason"] for r in doc["rejected"]}
    assert sorted(got) == [4, 8]
    assert "cp 4: seq 100 is not divisible by 8 (2 x cp); expected a multiple of 8 (nearest: 96 or 104)" in got[4]
    assert "cp 8: seq 100 is not divisible by 16 (2 x cp)" in got[8]


def test_dense_model_refuses_expert_parallelism() -> None:
    with pytest.raises(TuneError, match=r"--ep: llama-3-8b has no experts; got 1,4; expected 1 \(expert"):
        ModelProblem("llama3-8b", ["dgx-h100"], batch=(1,), dtypes=("bf16",), train=True, ep=(1, 4))
    plain = ModelProblem("llama3-8b", ["dgx-h100"], batch=(1,), dtypes=("bf16",), train=True, ep=(1,))
    assert {a.name: a.values for a in plain.space.axes}["ep"] == (1,)


@pytest.mark.parametrize(("argv", "needle"), [
    (["--ep", "0"], "--ep: '0' is not a positive integer; got '0'; expected e.g. 1,2,4,8 or auto"),
    (["--ep", "x"], "--ep: 'x' is not a positive integer; got 'x'; expected e.g. 1,2,4,8 or auto"),
    (["--cp", "2,"], "--cp: empty search space entry; got '2,'"),
    (["--ep", "4"], "--ep: llama-3-8b has no experts; got 4; expected 1"),
    (["--microbatch", "1", "--batch", "2"], "--microbatch: the batch axis of a training search; got --batch 2"),
])
def test_bad_axis_input_is_one_located_line(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert main(["tune", "llama3-8b", "--hardware", "dgx-h100", "--train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_microbatch_and_degrees_need_their_context(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "gpt2", "--hardware", "dgx-h100", "--microbatch", "2"]) == 2
    assert "--microbatch: sequences per training microbatch; got --microbatch 2 without --train" in \
        capsys.readouterr().err
    assert main(["tune", "gpt2", "--hardware", "h100-sxm5-80gb", "--train", "--cp", "2"]) == 2
    assert "--tp/--pp/--dp/--ep/--cp/--capacity-factor: parallel plans need a multi-device system" in capsys.readouterr().err


def test_csv_carries_the_plan_step(capsys: pytest.CaptureFixture[str]) -> None:
    import csv
    import io

    assert main(["tune", "gpt2", "--hardware", "dgx-h100", "--train", "--seq", "128", "--microbatch", "2",
                 "--dtype", "bf16", "--fusion", "on", "--recompute", "none", "--tp", "1", "--pp", "1", "--dp", "2",
                 "--cp", "1,2", "--global-batch", "8", "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted((r["cp"], r["ep"], r["microbatch"], r["global_batch"], r["microbatches"], r["devices_count"])
                  for r in rows) == [("1", "1", "2", "8", "2", "2.0"), ("2", "1", "2", "8", "2", "4.0")]


def test_capacity_factor_axis_is_predicts_and_names_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """Mixtral routes each token to 2 of 8 experts: a capacity factor above 8 / 2 = 4 gives every expert room for
    every token, so 5 is refused with that bound; 1.25 costs what `predict --capacity-factor 1.25` costs."""
    rc, doc = _json(capsys, ["tune", *MIXTRAL, "--fusion", "on", "--recompute", "full", "--tp", "1", "--pp", "1",
                             "--dp", "16", "--ep", "8", "--capacity-factor", "none,1.25,5", "--microbatch", "1",
                             "--sharding", "fsdp", "--objective", "throughput", "--json", "--all-rejected"])
    assert rc == 0 and doc["space"]["axes"]["capacity_factor"] == ["none", 1.25, 5.0]
    assert [r["config"]["capacity_factor"] for r in doc["rejected"]] == [5.0]
    assert "capacity_factor 5: above experts / top_k = 8 / 2" in doc["rejected"][0]["reason"]
    got = {b["config"]["capacity_factor"]: b for b in doc["best"]}
    assert got["none"]["plan"]["capacity_factor"] is None and got[1.25]["plan"]["capacity_factor"] == 1.25
    rc, pred = _json(capsys, ["predict", *MIXTRAL, "--recompute", "full", "--dp", "16", "--ep", "8", "--microbatch",
                              "1", "--fsdp", "--fusion", "--capacity-factor", "1.25", "--json"])
    assert rc == 0 and pred["latency_s"] == pytest.approx(got[1.25]["metrics"]["latency_s"], rel=1e-12)
    assert main(["tune", "llama3-8b", "--hardware", "dgx-h100", "--train", "--capacity-factor", "1"]) == 2
    assert "--capacity-factor: llama-3-8b has no experts" in capsys.readouterr().err
    assert main(["tune", "mixtral-8x7b", "--hardware", "dgx-h100", "--train", "--capacity-factor", "0"]) == 2
    assert "--capacity-factor: '0' is not none or a number > 0" in capsys.readouterr().err

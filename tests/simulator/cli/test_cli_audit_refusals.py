"""Inputs the CLI had accepted and then ignored or mis-reported, each now one located line and exit 2 (or a
consistent output), found by a pass over every subcommand as a new user runs it."""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line

SERVE_SMALL = ("--lengths", "fixed:in=64,out=8", "--requests", "5")


def test_serve_replicas_with_disaggregation_is_refused(capsys) -> None:
    # prefill=1,decode=1 --replicas 2 ran the very same two replicas as without --replicas (the flag was dropped)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "dgx-h100", *SERVE_SMALL,
                       "--disaggregate", "prefill=1,decode=1", "--replicas", "2")
    one_line(rc, err, "replicas: got 2 with disaggregate prefill=1,decode=1", "expected replicas 1")
    assert capsys.readouterr().out == ""


def test_predict_fsdp_with_zero_1_is_refused(capsys) -> None:
    # --fsdp --zero 1 printed "plan dp 8 (ZeRO-3)": the stage asked for was dropped
    rc, err = cli_exit(capsys, "predict", "llama-2-7b", "--hardware", "dgx-h100", "--train", "--dp", "8", "--fsdp",
                       "--zero", "1")
    one_line(rc, err, "zero_stage: got 1 with fsdp; expected zero_stage 0 or 3")


def test_tune_negative_constraint_is_refused(capsys) -> None:
    # latency_s<=-1 rejected every configuration ("No configuration meets the constraints", exit 1), where
    # serve --slo refuses a negative bound as bad input
    rc, err = cli_exit(capsys, "tune", "gpt2", "--hardware", "h100-sxm5-80gb", "--batch", "1", "--dtype", "bf16",
                       "--constraint", "latency_s<=-1")
    one_line(rc, err, "--constraint 'latency_s<=-1': negative bound; got '-1'; expected a value >= 0")


def test_predict_bound_line_partitions_the_time_on_two_streams(capsys) -> None:
    import re

    from simulator.cli.main import main

    # on two overlapping streams the line had read "compute 79.1%, memory 23.6%, latency 0.0%" (102.7%)
    assert main(["predict", "gpt2", "--hardware", "h100-sxm5-80gb", "--batch", "8", "--seq", "512",
                 "--engine", "des", "--streams", "2"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Bound:"))
    shares = [float(x) for x in re.findall(r"([0-9.]+)%", line)]
    assert len(shares) == 3 and sum(shares) == pytest.approx(100.0, abs=0.15)


@pytest.mark.parametrize(("flags", "needle"), [
    (("--recompute", "full"), "--recompute full: activation recomputation is a training option; got no --train"),
    (("--optimizer", "sgd"), "--optimizer sgd: only a training step has an optimizer; got no --train"),
    (("--phase", "train", "--recompute", "full"), "--recompute full: activation recomputation is a training option"),
])
@pytest.mark.parametrize("hardware", [("--hardware", "h100-sxm5-80gb"), ("--hardware", "dgx-h100", "--dp", "2")])
def test_predict_training_flags_without_train_are_refused(capsys, flags: tuple[str, ...], needle: str,
                                                           hardware: tuple[str, ...]) -> None:
    # each had printed the inference step unchanged, the flag dropped
    rc, err = cli_exit(capsys, "predict", "gpt2", *hardware, *flags)
    one_line(rc, err, needle)


def test_predict_plan_training_fields_without_train_are_refused(capsys) -> None:
    rc, err = cli_exit(capsys, "predict", "mixtral-8x7b", "--hardware", "dgx-h100", "--offload", "params")
    one_line(rc, err, "plan: offload: training only; got offload=('params',) for an inference step")
    rc, err = cli_exit(capsys, "predict", "gpt2", "--hardware", "dgx-h100", "--dp", "2", "--phase", "train")
    one_line(rc, err, "phase: got 'train' without train=True", "expected train=True (--train)")


def test_hardware_list_memory_is_the_figure_fit_checks_use(capsys) -> None:
    from simulator.cli.main import main

    # an "80 GB" H100 was listed as 74.5 GiB (80e9 B, the marketed figure read as decimal) while predict says
    # "needs ... of 79.18 GiB" (PyTorch's reported total, memory.hbm.usable_bytes); the TPU keeps its 16 GiB HBM
    assert main(["hardware"]) == 0
    rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.strip()}
    assert " 79.2 GiB " in rows["h100-sxm5-80gb"] and "74.5 GiB" not in rows["h100-sxm5-80gb"]
    assert " 16 GiB " in rows["tpu-v5e"]


def test_measure_device_name_on_the_cpu_is_refused_before_timing(capsys, tmp_path) -> None:
    # the quick suite ran (minutes) and wrote rows named "host", the typo'd GPU name dropped without a word
    out = tmp_path / "m.csv"
    rc, err = cli_exit(capsys, "measure", "--out", str(out), "--device-name", "h100-sxm5-8gb")
    one_line(rc, err, "measure: --device-name h100-sxm5-8gb: the device column of a GPU run; got --device cpu")
    assert not out.exists()


def test_serve_summary_names_a_disaggregated_split(capsys) -> None:
    from simulator.cli.main import main

    # "x 8 replica(s), vllm scheduler" had read as eight colocated replicas
    assert main(["serve", "llama-2-7b", "--hardware", "dgx-h100", *SERVE_SMALL, "--disaggregate",
                 "prefill=2,decode=6"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "x 8 replica(s) disaggregated prefill=2,decode=6, vllm scheduler" in head


def test_serve_stability_percentage_needs_a_measurement_interval(capsys) -> None:
    # --stability-percentage 5 alone ran the same requests as without it (only the config echo differed)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", *SERVE_SMALL,
                       "--stability-percentage", "5")
    one_line(rc, err, "stability_percentage: got 5.0 with no measurement_interval_s; expected a measurement interval")


def test_serve_refuses_a_training_stack(capsys) -> None:
    # --framework fsdp2 priced every serving iteration with a training stack's kernels (predict refuses it)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "dgx-h100", *SERVE_SMALL, "--framework", "fsdp2")
    one_line(rc, err, "framework: got 'fsdp2', a training stack (stack 'fsdp2'); expected a serving or inference "
                      "profile: compile, cuda-graphs")

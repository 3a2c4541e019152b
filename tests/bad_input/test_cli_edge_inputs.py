"""Bad input found by trying the CLI as a new user would: each case is one located line and exit 2 (never a
traceback, a silent zero or a figure of nothing), and near matches name each candidate once.

- a model name whose alias and canonical name are both near the typo (``llama-2-7``);
- a value outside an argparse ``choices`` list (``--phase decod``, a command typo): a near match too;
- an MoE capacity factor above experts / top_k (``1e300`` overflowed the op's FLOP count to a traceback);
- fp8 linears on a device without fp8 tensor rates (blamed ``--dtype``, a flag not given);
- serving arrivals whose span outruns the float64 clock (``qps=1e-300``: every latency 0 s) or whose
  expected request count cannot be held (``qps=1e9`` for an hour: a 28 TiB allocation);
- a trace row 1e300 s after the first, or with more fields than the header;
- a per-request CSV with a NaN or negative TTFT handed to ``plot serving``;
- ``tune --serve`` with an unknown scheduler, device, stack or a model that generates no tokens (every candidate
  rejected for the same typo, exit 1);
- ``hardware show`` of a TPU slice printed an empty ``file`` line (a slice is built from its name);
- ``serve resnet50`` printed only ``nodeperf: error: resnet50`` (a KeyError), a micro-workload was an "unknown
  model";
- ``predict --phase decode --input-len 100`` without a plan, and ``--fp8-params`` without ``--fp8-linears``: ignored;
- a measurement of 1e-300 s (a unit slip) validated into a 300-digit error percentage;
- MoE options (``--moe-host-sync``, ``--moe-dispatch``) on a dense model: ignored, where a capacity factor is refused;
- ``systolic --clock '1e300 GHz'`` (inf: blamed on the energy model's clock_hz) and ``serve --iteration-host-s 1e300``
  (every latency about 1e285 Ps);
- realtime rates, periods and deadlines beyond the float64 clock (``1e-300 Hz``: latencies of 0 s; ``1e300 Hz``:
  a 300-digit utilisation) and ``--frames 1000000000000`` (ran until the 300 s wall-clock limit);
- a price file with two problems printed two bare lines (no count line), one calling a bare number "missing";
- ``hardware list`` said clusters take 1-1024 nodes where names take up to 4096;
- ``--duration '1 hour'`` named no unit and no near match; an SLO refused ``h``, a unit ``--duration`` takes;
- ``predict llama-2-7b --batch 1e21`` predicted 2.4e21 GiB where a micro-workload's tensor is bounded by 2**48;
- ``--weight-dtype fp8`` on a device without fp8 rates said to choose with ``--dtype``.
"""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line

H100 = ("--hardware", "h100-sxm5-80gb")
SERVE = ("serve", "llama-2-7b", *H100, "--lengths", "fixed:in=64,out=8")
REQUESTS_HEADER = ("id,arrival_s,input_len,output_len,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,replica,preemptions,"
                   "cached_tokens,itl_mean_s")


def test_model_typo_names_each_model_once(capsys) -> None:
    rc, err = cli_exit(capsys, "predict", "llama-2-7", *H100)
    line = one_line(rc, err, "model 'llama-2-7': unknown model")
    offered = line.split("did you mean ")[1].rstrip("?").split(", ")
    assert offered == ["'llama-2-7b'", "'llama-2-70b'", "'llama-3-70b'"]


@pytest.mark.parametrize(("argv", "parts"), [
    (("predict", "gpt2", *H100, "--phase", "decod"),
     ("argument --phase: got 'decod'; expected one of forward, prefill, decode, train, generate",
      "did you mean 'decode'?")),
    (("predcit", "gpt2"), ("argument COMMAND: got 'predcit'; expected one of models, graph", "did you mean 'predict'?")),
    (("serve", "llama-2-7b", *H100, "--router", "least-load"),
     ("argument --router: got 'least-load'; expected one of round-robin, least-loaded", "did you mean 'least-loaded'?")),
])
def test_choice_typos_get_a_near_match(capsys, argv: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *argv)
    line = one_line(rc, err, *parts)
    assert "invalid choice" not in line and "choose from" not in line


@pytest.mark.parametrize(("argv", "line"), [
    (("predict", "gpt2", *H100, "--zero", "4"), "nodeperf: error: argument --zero: got 4; expected one of 1, 2, 3"),
    (("predict", "gpt2", *H100, "--zero", "two"), "nodeperf: error: argument --zero: got 'two'; expected an integer"),
    (("graph", "gpt2", "--top", "1.5"), "nodeperf: error: argument --top: got '1.5'; expected an integer"),
    (("hardware", "shwo"), "nodeperf: error: argument action: got 'shwo'; expected one of list, show; "
                           "did you mean 'show'?"),
])
def test_choices_and_typed_flags_speak_the_located_form(capsys, argv: tuple[str, ...], line: str) -> None:
    rc, err = cli_exit(capsys, *argv)
    assert one_line(rc, err) == line


@pytest.mark.parametrize("cf", ["1e300", "5"])
def test_capacity_factor_above_experts_over_top_k(capsys, cf: str) -> None:
    rc, err = cli_exit(capsys, "predict", "mixtral-8x7b", "--phase", "decode", "--hardware", "dgx-h100", "--ep", "8",
                       "--dp", "8", "--capacity-factor", cf)
    one_line(rc, err, f"mixtral-8x7b: capacity_factor {float(cf):g}", "experts / top_k = 8 / 2", "expected at most 4")


@pytest.mark.parametrize(("device", "recipe", "rates"), [("a100-sxm4-80gb", "rowwise", "fp64, tf32, bf16, fp16, int8, int4"),
                                                         ("tpu-v5e", "delayed", "fp32, bf16, int8, int4")])
def test_fp8_linears_on_a_device_without_fp8_rates(capsys, device: str, recipe: str, rates: str) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", "--train", "--seq", "128", "--global-batch", "1", "--hardware", device,
                       "--fp8-linears", recipe)
    one_line(rc, err, f"plan: fp8_linears {recipe}: fp8 GEMMs need fp8 tensor-core rates",
             f"got device '{device}' with {rates}", "expected a device with fp8 tensor cores")
    assert "--dtype" not in err


def test_arrival_span_beyond_the_clock(capsys) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--arrival", "poisson:qps=1e-300", "--requests", "10")
    one_line(rc, err, "arrival/requests: a span of about 1e+301 s (qps 1e-300)", "expected at most 4.5e+06 s")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("qps", "duration", "count"), [("1e9", "1 h", "3.6e+12"), ("1", "1e30 h", "3.6e+33"),
                                                        ("1e300", "1 h", "3.6e+303")])
def test_arrival_count_beyond_the_request_limit(capsys, qps: str, duration: str, count: str) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--arrival", f"poisson:qps={qps}", "--duration", duration)
    one_line(rc, err, f"arrival/duration_s: about {count} requests", "expected at most 100,000,000")


@pytest.mark.parametrize(("rows", "parts"), [
    ("0,64,8\n1e300,64,8\n", ("trace.csv:3: arrival_s: 1e+300 s after the first row", "expected at most 4.5e+06 s")),
    ("0,64,8\n1,64,8,9\n", ("trace.csv:3: 4 fields; got ['1', '64', '8', '9']; expected 3",)),
])
def test_trace_rows_the_clock_or_header_cannot_hold(capsys, tmp_path, monkeypatch, rows: str,
                                                    parts: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.csv").write_text("arrival_s,input_len,output_len\n" + rows, encoding="utf-8")
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", *H100, "--arrival", "trace:trace.csv")
    one_line(rc, err, *parts)


@pytest.mark.parametrize(("row", "parts"), [
    ("0,0,64,4,0.1,0.3,nan,0.0067,0.3,0,0,0,0.0067", ("r.csv:2: ttft_s: got 'nan'",)),
    ("0,0,64,4,0.1,0.3,-1,0.0067,0.3,0,0,0,0.0067", ("r.csv:2: ttft_s: got '-1'",)),
    ("0,0,64,4,0.1,0.3,0.1,,0.3,0,0,0,", ("r.csv:2: tpot_s: got 'nan'",)),
    ("0,0,64,4,0.1,0.3,abc,0.0067,0.3,0,0,0,0.0067", ("r.csv:2: ttft_s: got 'abc'",)),
])
def test_plot_serving_refuses_latencies_that_are_not_times(capsys, tmp_path, monkeypatch, row: str,
                                                           parts: tuple[str, ...]) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.csv").write_text(f"{REQUESTS_HEADER}\n{row}\n", encoding="utf-8")
    rc, err = cli_exit(capsys, "plot", "serving", "r.csv", "-o", "s.png")
    one_line(rc, err, "serving figure: ", *parts, "expected a finite number of seconds >= 0")
    assert not (tmp_path / "s.png").exists()


def test_tune_serve_unknown_scheduler_is_one_line(capsys) -> None:
    rc, err = cli_exit(capsys, "tune", "llama-2-7b", "--serve", *H100, "--slo", "ttft_p99<=2 s", "--scheduler", "vlm")
    one_line(rc, err, "--scheduler: unknown scheduler; got 'vlm'", "did you mean 'vllm'?")


def test_tune_serve_chunks_without_sarathi_is_one_line(capsys) -> None:
    # every candidate had been rejected for the same reason, exit 1 ("cannot run: chunk: ...")
    rc, err = cli_exit(capsys, "tune", "llama-2-7b", "--serve", *H100, "--slo", "ttft_p99<=2 s", "--chunk", "256,512")
    one_line(rc, err, "--chunk: Sarathi-Serve's chunk size; got 256,512 with --scheduler vllm",
             "expected --scheduler sarathi")


@pytest.mark.parametrize(("name", "file_line"), [("tpu-v6e-256", None), ("tpu-v5e-256x4", None),
                                                 ("dgx-h100", "dgx-h100.toml")])
def test_hardware_show_prints_a_file_only_when_there_is_one(capsys, name: str, file_line: str | None) -> None:
    from simulator.cli.main import main

    assert main(["hardware", "show", name]) == 0
    lines = capsys.readouterr().out.splitlines()
    files = [ln for ln in lines[:3] if ln.startswith("  file")]
    assert [ln.rsplit("/", 1)[-1] for ln in files] == ([file_line] if file_line else [])
    assert "  file" not in [ln.rstrip() for ln in lines]


@pytest.mark.parametrize(("model", "got"), [("resnet50", "got a cnn model"), ("gemm:m=1,n=2,k=3", "got a micro-workload"),
                                            ("bert-base", "got an encoder")])
def test_serve_a_model_that_generates_no_tokens(capsys, model: str, got: str) -> None:
    rc, err = cli_exit(capsys, "serve", model, *H100, "--requests", "2", "--lengths", "fixed:in=16,out=2")
    one_line(rc, err, f"model {model!r}: not a decoder language model", got, "expected a zoo decoder")


@pytest.mark.parametrize(("argv", "parts"), [
    (("--phase", "decode", "--input-len", "100"), ("predict: --input-len/--output-len", "got --phase decode",
                                                   "expected --phase generate")),
    (("--phase", "decode", "--fp8-params"), ("predict: --fp8-params", "got no --fp8-linears")),
])
def test_predict_flags_that_were_silently_ignored(capsys, argv: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", *H100, *argv)
    one_line(rc, err, *parts)


def test_measurement_faster_than_any_timer(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.csv").write_text('workload,device,dtype,median_s\n"gemm:m=64,n=64,k=64",h100-sxm5-80gb,bf16,1e-300\n',
                                    encoding="utf-8")
    rc, err = cli_exit(capsys, "validate", "m.csv", *H100)
    one_line(rc, err, "m.csv:2: median_s: below any timer's resolution; got 1e-300; expected at least 1e-09 s")


@pytest.mark.parametrize(("flags", "given"), [(("--moe-host-sync",), "moe_host_sync True"),
                                              (("--moe-dispatch", "deepep"), "moe_dispatch deepep")])
def test_moe_options_on_a_dense_model(capsys, flags: tuple[str, ...], given: str) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", "--train", "--seq", "128", "--global-batch", "8", "--hardware",
                       "dgx-h100", "--dp", "8", *flags)
    one_line(rc, err, f"gpt2: {given}: the model has no experts; expected no MoE options")


def test_systolic_clock_that_overflows(capsys) -> None:
    rc, err = cli_exit(capsys, "systolic", "--rows", "8", "--cols", "8", "--dataflow", "ws", "--topology",
                       "gemm:m=64,n=64,k=64", "--clock", "1e300 GHz")
    one_line(rc, err, "--clock: not a finite frequency; got '1e300 GHz'")


def test_serve_iteration_host_time_beyond_the_clock(capsys) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--requests", "2", "--iteration-host-s", "1e300")
    one_line(rc, err, "iteration_host_s: got 1e+300; expected seconds >= 0 and at most 4.5e+06")


SCENARIO = """name = "tiny"
frames = 5

[[tasks]]
name = "camera"
model = "gemm:m=64,n=64,k=64"
device = "gpu"
{activation}
deadline = "{deadline}"
priority = 5
"""


@pytest.mark.parametrize(("activation", "deadline", "parts"), [
    ('rate = "1e-300 Hz"', "5 ms", ("tasks.camera.rate: out of range; got '1e-300 Hz'", "to 1 GHz")),
    ('rate = "1e300 Hz"', "5 ms", ("tasks.camera.rate: out of range; got '1e300 Hz'",)),
    ('period = "1e-300 s"', "5 ms", ("tasks.camera.period: out of range; got '1e-300 s'; expected at least 1 ns",)),
    ('rate = "30 Hz"', "1e30 s", ("tasks.camera.deadline: out of range; got '1e30 s'; expected at most 4.5e+06 s",)),
])
def test_realtime_times_beyond_the_clock(capsys, tmp_path, monkeypatch, activation: str, deadline: str,
                                         parts: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SCENARIO.format(activation=activation, deadline=deadline), encoding="utf-8")
    rc, err = cli_exit(capsys, "realtime", "s.toml", "--hardware", "l4")
    one_line(rc, err, "s.toml: ", *parts)


def test_realtime_frames_beyond_the_clock(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SCENARIO.format(activation='rate = "30 Hz"', deadline="5 ms"), encoding="utf-8")
    rc, err = cli_exit(capsys, "realtime", "s.toml", "--hardware", "l4", "--frames", "1000000000000")
    one_line(rc, err, "frames; got 1000000000000: a horizon of 3.33e+10 s; expected at most 4.5e+06 s")


def test_price_file_with_two_problems_is_a_count_line_and_located_lines(capsys, tmp_path, monkeypatch) -> None:
    from tests.bad_input.contract import several

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text('schema = 1\n[devices.h100-sxm5-80gb]\nusd_per_hour = 2.5\nsource = "x"\n',
                                     encoding="utf-8")
    rc, err = cli_exit(capsys, "tune", "gpt2", *H100, "--batch", "1", "--dtype", "bf16", "--fusion", "on",
                       "--objective", "cost", "--prices", "p.toml")
    body = several(rc, err, 2, "p.toml", each_names_where=True)
    assert body[1].endswith("usd_per_hour: not a table; got 2.5; expected usd_per_hour = { value = 2.5, source = \"...\" }")


@pytest.mark.parametrize(("argv", "parts"), [
    (("llama-2-7b", "--hardware", "h100-sxm5", "--framework", "vllm"), ("--hardware 'h100-sxm5': ", "did you mean 'h100-sxm5-80gb'")),
    (("llama-2-7b", *H100, "--framework", "vlm"), ("--framework: unknown framework; got 'vlm'", "did you mean 'vllm'?")),
    (("resnet50", *H100), ("model 'resnet50': not a decoder language model",)),
])
def test_tune_serve_unknown_names_are_one_line(capsys, argv: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, "tune", *argv, "--serve", "--slo", "ttft_p99<=2 s")
    one_line(rc, err, *parts)


def test_hardware_list_states_the_node_counts_the_names_take(capsys) -> None:
    from hwmodels.catalog import MAX_NODES
    from simulator.cli.main import main

    assert main(["hardware", "list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("clusters:"))
    assert f"(N nodes, 1-{MAX_NODES}," in line and MAX_NODES == 4096
    rc, err = cli_exit(capsys, "hardware", "show", f"dgx-h100x{MAX_NODES + 1}")
    one_line(rc, err, f"expected 1 to {MAX_NODES}")


@pytest.mark.parametrize(("text", "hint"), [("1 hour", "did you mean 'h'?"), ("90 sec", "did you mean 's'?"),
                                            ("2 S", "did you mean 's'?")])
def test_duration_unit_typos_get_a_near_match(capsys, text: str, hint: str) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--duration", text)
    one_line(rc, err, f"argument --duration: unit '{text.split()[1]}'; got '{text}'", "(units s, ms, min, h)", hint)


def test_an_slo_takes_the_units_a_duration_takes() -> None:
    from simulator.serving.metrics import parse_slo

    assert parse_slo("e2e_p99<=1 h") == ("e2e", "p99", 3600.0)


@pytest.mark.parametrize(("argv", "tensor"), [(("--batch", "1000000000000000000000"), "'input_ids'"),
                                              # the KV cache of a context within the model's (4096; a longer one
                                              # is refused first) at a batch of 1e10
                                              (("--phase", "decode", "--context", "4096", "--batch", "10000000000"),
                                               "'layers.0.attn.k_cache'")])
def test_zoo_tensors_beyond_the_micro_workload_bound(capsys, argv: tuple[str, ...], tensor: str) -> None:
    rc, err = cli_exit(capsys, "predict", "llama-2-7b", *H100, *argv)
    one_line(rc, err, f"model 'llama-2-7b': tensor {tensor} too large", "expected at most 2.81e+14 (2**48) per tensor")


def test_quantised_weights_without_a_rate_name_the_weight_flag(capsys) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", "--hardware", "tpu-v5e", "--weight-dtype", "fp8", "--phase", "decode")
    one_line(rc, err, "no rate for dtype 'fp8_e4m3'", "quant_matmul", "(choose one with --weight-dtype)")

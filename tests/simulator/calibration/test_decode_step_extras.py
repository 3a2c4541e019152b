"""A serving stack's decode-step work outside the model's graph, as the software-stack validation and `serve` price
it: the vLLM V0 sampler call's host time (Vidur's SAMPLER_E2E less its device work) before its kernels, and the
eager ops and synchronisations a synchronous engine (SGLang 0.3) runs around the graph replay."""

from __future__ import annotations

import pytest

from simulator.calibration.frameworks_validation import (
    _row_costing,
    _sampler_kernels_s,
    decode_host_ops_s,
    decode_sampler_s,
    decode_step_extras_s,
    load_framework_rows,
)
from workloads.frameworks import get_profile


@pytest.fixture(scope="module")
def rows():
    ms, parsed = load_framework_rows()
    return {m.id: (m, p, o) for m, (p, o) in zip(ms, parsed, strict=True)}


def test_vllm_v0_sampler_line_with_its_device_work_gives_the_vidur_points():
    """microsoft/vidur data/profiling/a100/cpu_overheads.csv, Llama-2-7B TP1, SAMPLER_E2E_MEAN: 0.8792 ms at batch 8,
    1.3195 ms at 64, a call that runs the LM head and the sampling kernels. The profile's host line plus the device
    time this model gives that work on the A100 80GB PCIe gives both within 0.1%."""
    from simulator.engines.analytical import EvalOptions
    from simulator.hardware import load_hardware
    from simulator.serving.iteration import IterationPricer
    from workloads.parallel import ParallelPlan

    p = get_profile("vllm-v0")
    pricer = IterationPricer("llama-2-7b", load_hardware("a100-pcie-80gb"), ParallelPlan(),
                             EvalOptions(**p.cost_options()), dtype="fp16", sampler=p.sampler_kernels)
    for batch, e2e in ((8, 0.8792104815845104e-3), (64, 1.319542252100431e-3)):
        line = p.sampler_host_s + p.sampler_host_per_seq_s * batch
        assert line + pricer.head_point(batch)[0] == pytest.approx(e2e, rel=1e-3)
    assert "SAMPLER_E2E_MEAN" in p.sampler_host_source
    # no other stack records a sampler call time
    assert get_profile("vllm").sampler_host_s == get_profile("sglang-0.3").sampler_host_s == 0.0


def test_sampler_host_time_precedes_its_kernels(rows):
    m, p, o = rows["fw-085"]  # vLLM V0, H200, batch 8
    _, dev, eo = _row_costing(m, p, o)
    kernels = _sampler_kernels_s(m, p.sampler_kernels, dev, eo)
    assert 0 < kernels < 0.1e-3  # six kernels over 8 x 128,256 logits
    assert decode_sampler_s(m, p, dev, eo) == pytest.approx(0.617e-3 + 8 * 0.00708e-3 + kernels, rel=1e-12)
    assert decode_host_ops_s(m, p, dev, eo) == 0.0  # V0's input preparation is in iteration_host_s


def test_serve_charges_the_sampler_call_with_the_iteration_host_time():
    from simulator.hardware import load_hardware
    from simulator.serving.iteration import IterationPricer
    from workloads.parallel import ParallelPlan

    pricer = IterationPricer("llama-3-8b", load_hardware("h100-sxm5-80gb"), ParallelPlan(), host_s=0.28e-3, host_per_seq_s=0.0296e-3,
                             sampler_host=(0.623e-3, 0.00700e-3))
    assert pricer.host_time(8) == pytest.approx(0.28e-3 + 8 * 0.0296e-3 + 0.623e-3 + 8 * 0.00700e-3, rel=1e-12)


def test_sglang_03_eager_ops_around_the_replay(rows):
    m, p, o = rows["fw-088"]
    _, dev, eo = _row_costing(m, p, o)
    assert (p.decode_host_ops, p.decode_host_syncs) == (26, 6)
    assert decode_host_ops_s(m, p, dev, eo) == pytest.approx(26 * 20e-6 + 6 * 5.8e-6, rel=1e-12)
    # no recorded sampler call time: its kernels' device time
    assert decode_sampler_s(m, p, dev, eo) == pytest.approx(_sampler_kernels_s(m, p.sampler_kernels, dev, eo))


def test_no_extras_for_v1_engines_and_other_phases(rows):
    for rid in ("fw-060", "fw-089", "fw-001", "fw-013"):  # vLLM V1, SGLang 0.4+, a training step, a forward pass
        m, p, o = rows[rid]
        _, dev, eo = _row_costing(m, p, o)
        assert decode_step_extras_s(m, p, dev, eo) == 0.0, rid

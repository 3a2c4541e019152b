"""vLLM 0.6.0's decode batches as its CUDA graphs run them, against the ``vllm-v0`` pricer.

vLLM 0.6.0 (``vllm/worker/model_runner.py`` at 32e7db25): ``_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i ...]``
up to ``_get_max_graph_batch_size(max_num_seqs)`` (256 at the default ``max_num_seqs``), and
``_get_graph_batch_size`` pads a decode batch: ``b`` for ``b <= 2``, 4 for ``b <= 4``, else ``ceil(b / 8) * 8``.
The batches below are the mean decode batches of the SGLang README's vLLM 0.6.0 rows (8B on an A100 at 4 / 8
requests/s: about 9 / 20; 70B on four H100s: about 15 / 35; the 5,000-prompt bursts: about 199), padded by hand.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def pricer():  # noqa: ANN201
    from simulator.serving import ServeConfig
    from simulator.serving.setup import prepare
    from workloads.parallel import ParallelPlan

    cfg = ServeConfig(arrival="poisson:qps=4", lengths="fixed:in=128,out=16", scheduler="orca", requests=2, seed=0,
                      framework="vllm-v0", dtype="bf16", mixed_prefill=False)
    return prepare("llama-3-8b", "a100-sxm4-80gb", cfg, ParallelPlan()).pricer


@pytest.mark.parametrize(("batch", "padded"), [(1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (15, 16), (17, 24),
                                               (20, 24), (35, 40), (199, 200), (256, 256)])
def test_vllm_v0_pads_a_decode_batch_as_get_graph_batch_size(pricer, batch: int, padded: int) -> None:  # noqa: ANN001
    assert pricer.padded(batch) == padded


def test_vllm_v0_replays_a_graph_up_to_256(pricer) -> None:  # noqa: ANN001
    # _use_captured_graph: batch <= max_batchsize_to_capture (256) and the longest decode context within
    # max_seq_len_to_capture = min(8192, max_model_len): every decode step of the rows is a graph replay
    assert pricer.graph_sizes[-1] == 256
    assert pricer.replays_graph(256) and not pricer.eager_decode(256)

"""What the device run measures: the case lists (full on a GPU, tiny for the CPU dry run).

Each case is a micro-workload of ``workloads.micro`` (so ``nodeperf validate`` and ``calibrate`` rebuild
exactly what was timed). The shape lists cover what the model most needs (issue: kernel fidelity):

* tensor-core GEMMs (bf16, fp16; fp8 through cuBLASLt's scaled matmul) from a GEMV to 16384^3: decode
  GEMVs and skinny GEMMs, square sweeps, and the linear layers of Llama-2-7B/70B prefill;
* fp32 GEMMs with TF32 off at the shapes and layouts of eager BERT-Large training (tokens = 8 x 512,
  hidden 1024, 16 heads of 64): forward ``x @ W^T`` (transpose=2), the data gradient ``dY @ W``
  (transpose=0), the weight gradient ``dY^T @ X`` (transpose=1), and the per-head attention GEMMs;
* streaming ops (copy, add, scale) from 1 MiB to 4 GiB per tensor;
* the launch floor: a one-element add.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class GemmShape:
    """One GEMM ``C[m, n] = A[m, k] @ B[k, n]`` (``b`` batched), with the operand layout bits of
    ``workloads.micro`` (``transpose``: bit 1 A stored (k, m), bit 2 B stored (n, k))."""

    m: int
    n: int
    k: int
    b: int = 1
    transpose: int = 0

    @property
    def workload(self) -> str:
        w = f"gemm:m={self.m},n={self.n},k={self.k}"
        if self.b > 1:
            w += f",b={self.b}"
        return w + (f",transpose={self.transpose}" if self.transpose else "")


#: Tensor-core GEMMs (bf16 and fp16): GEMV to 16384^3.
TENSOR_GEMMS = (
    GemmShape(1, 4096, 4096), GemmShape(1, 8192, 8192), GemmShape(1, 28672, 8192),          # decode GEMVs
    GemmShape(16, 8192, 8192), GemmShape(64, 8192, 8192), GemmShape(128, 4096, 4096),     # batched decode
    *(GemmShape(s, s, s) for s in (256, 512, 1024, 2048, 4096, 8192, 16384)),             # squares
    GemmShape(4096, 12288, 4096, transpose=2), GemmShape(4096, 4096, 4096, transpose=2),  # Llama-2-7B, 4096 tokens
    GemmShape(4096, 22016, 4096, transpose=2), GemmShape(4096, 4096, 11008, transpose=2),
    GemmShape(8192, 28672, 8192, transpose=2), GemmShape(8192, 8192, 28672, transpose=2),  # Llama-2-70B MLP
    GemmShape(1000, 1000, 1000), GemmShape(4095, 4095, 4095),                            # unaligned
)
#: fp8 (e4m3) GEMMs through ``torch._scaled_mm`` (cuBLASLt): every dimension a multiple of 16.
FP8_GEMMS = (
    GemmShape(16, 8192, 8192), GemmShape(128, 8192, 8192),
    *(GemmShape(s, s, s) for s in (1024, 2048, 4096, 8192, 16384)),
    GemmShape(8192, 28672, 8192), GemmShape(8192, 8192, 28672),
)
#: fp32 (TF32 off) GEMMs of eager BERT-Large training, 8 x 512 tokens.
FP32_GEMMS = (
    GemmShape(4096, 3072, 1024, transpose=2), GemmShape(4096, 1024, 1024, transpose=2),   # QKV, out proj
    GemmShape(4096, 4096, 1024, transpose=2), GemmShape(4096, 1024, 4096, transpose=2),   # FFN up, down
    GemmShape(4096, 1024, 3072), GemmShape(4096, 1024, 4096), GemmShape(4096, 4096, 1024),  # data gradients
    GemmShape(3072, 1024, 4096, transpose=1), GemmShape(1024, 4096, 4096, transpose=1),    # weight gradients
    GemmShape(4096, 1024, 4096, transpose=1),
    GemmShape(512, 512, 64, b=128, transpose=2), GemmShape(512, 64, 512, b=128),         # scores, context
    GemmShape(512, 64, 512, b=128, transpose=1),                                         # dV, dK
    GemmShape(32, 32, 32, b=4096), GemmShape(2048, 2048, 2048),
)
#: Small GEMMs timed three ways (``_gemm_timing``): the shapes and operand layouts of the published H100 rows that
#: the two timers disagree on. OpenXLA's table (CUPTI kernel records; lhs [b, m, k], rhs [b, k, n] row-major, so B
#: N-major): bf16 and TF32 256^3 to 1024^3, batched and with K = 4096, TF32 also with B K-major for the layout's own
#: cost; triton-lang/triton issue #2339 (``do_bench`` after a 256 MB flush; b = randn(N, K).T, so B K-major): fp16.
TIMING_GEMMS = (
    *((GemmShape(s, s, s), dt) for dt in ("bf16", "tf32") for s in (256, 512, 1024)),
    *((GemmShape(1024, 1024, 1024, b=2), dt) for dt in ("bf16", "tf32")),
    *((GemmShape(1024, 1024, 4096), dt) for dt in ("bf16", "tf32")),
    *((GemmShape(s, s, s, transpose=2), "tf32") for s in (512, 1024)),
    *((GemmShape(2048, n, n, transpose=2), "fp16") for n in (512, 1024, 2048, 4096)),
)
DRY_TIMING_GEMMS = ((GemmShape(32, 32, 32), "fp32"), (GemmShape(16, 16, 32, b=2, transpose=2), "tf32"))
#: Bytes per tensor of the streaming cases: 1 MiB to 4 GiB in steps of 4x.
STREAM_BYTES = tuple(MIB * 4**i for i in range(7))
#: The same lists for the CPU dry run: tiny shapes, the same code paths.
DRY_TENSOR_GEMMS = (GemmShape(1, 64, 64), GemmShape(64, 64, 64), GemmShape(32, 48, 64, transpose=2))
DRY_FP8_GEMMS = (GemmShape(16, 32, 32),)
DRY_FP32_GEMMS = (GemmShape(64, 32, 48, transpose=1), GemmShape(16, 16, 16, b=4, transpose=2))
DRY_STREAM_BYTES = (4096, 65536)


def stream_workloads(nbytes: int, dtype_bytes: int) -> list[str]:
    """Copy, add and scale over tensors of ``nbytes`` each (``dtype_bytes`` per element)."""
    numel = max(1, nbytes // dtype_bytes)
    return [f"copy:bytes={nbytes}", f"elementwise:numel={numel},op=add", f"elementwise:numel={numel},op=scale"]


#: The launch floor: one kernel over one element.
LAUNCH_WORKLOAD = "elementwise:numel=1,op=add"

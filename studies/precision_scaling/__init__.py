"""Precision-scaling study: speedup of bf16 and fp8 over fp32 per op kind on several GPUs
(``python -m studies.precision_scaling [--reduced] [--out DIR]``)."""

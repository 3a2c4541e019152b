"""Serving-capacity study: p99 TTFT and TPOT against Poisson load for Llama 3 8B and 70B on A100, H100
and H200 under two engine schedulers, and capacity per dollar over deployments
(``python -m studies.serving_capacity [--reduced] [--out DIR]``)."""

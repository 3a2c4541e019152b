"""Bandwidth-scaling study: LLM prefill and decode latency on a GPU whose memory bandwidth or compute
throughput is scaled (``python -m studies.bandwidth_scaling [--reduced] [--out DIR]``)."""

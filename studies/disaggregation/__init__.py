"""Disaggregation study: when do separate prefill and decode pools beat colocated replicas on the same
GPUs, by prompt length and latency SLO (``python -m studies.disaggregation [--reduced] [--out DIR]``)."""

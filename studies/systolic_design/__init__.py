"""Systolic-design study: ResNet-50 and BERT-Base on systolic arrays of one PE budget, over array shape,
dataflow and scratchpad size (``python -m studies.systolic_design [--reduced] [--out DIR]``)."""

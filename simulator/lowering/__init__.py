"""Lowering rules: which hardware-model function costs each op kind on each kind of device.

:mod:`simulator.lowering.common` holds what every device kind shares (``KernelCost``, the rule
registry, views, collectives, special-function counts); one module per device class registers its
rules: :mod:`~simulator.lowering.gpu` (SMs and tensor cores), :mod:`~simulator.lowering.tpu`
(systolic arrays), :mod:`~simulator.lowering.cpu` (host cores). The engines call :func:`lower`.
"""

from __future__ import annotations

from simulator.lazy import lazy_exports

#: Public name -> the module it is re-exported from (imported on first use, PEP 562).
_EXPORTS: dict[str, str] = {
    "collective_cost": "simulator.lowering.collectives",
    "COLLECTIVE_KINDS": "simulator.lowering.common",
    "NARROW_GROUP_CHANNELS": "simulator.lowering.common",
    "RULE_MODULES": "simulator.lowering.common",
    "VIEW_KINDS": "simulator.lowering.common",
    "KernelCost": "simulator.lowering.common",
    "LoweringContext": "simulator.lowering.common",
    "Rule": "simulator.lowering.common",
    "RuleSet": "simulator.lowering.common",
    "element_bytes": "simulator.lowering.common",
    "is_narrow_grouped_conv": "simulator.lowering.common",
    "lower": "simulator.lowering.common",
    "register_rule": "simulator.lowering.common",
    "ring_collective": "simulator.lowering.common",
    "rule_name_for": "simulator.lowering.common",
    "ruleset": "simulator.lowering.common",
    "set_fallback": "simulator.lowering.common",
    "sfu_ops": "simulator.lowering.common",
    "gpu_vector_flops": "simulator.lowering.common",
    "zero_cost": "simulator.lowering.common",
    "attention_kernel_for": "simulator.lowering.gpu",
}

__all__ = [
    "KernelCost",
    "LoweringContext",
    "Rule",
    "RuleSet",
    "ruleset",
    "register_rule",
    "collective_cost",
    "set_fallback",
    "lower",
    "rule_name_for",
    "VIEW_KINDS",
    "COLLECTIVE_KINDS",
    "NARROW_GROUP_CHANNELS",
    "RULE_MODULES",
    "attention_kernel_for",
    "element_bytes",
    "zero_cost",
    "is_narrow_grouped_conv",
    "ring_collective",
    "sfu_ops",
    "gpu_vector_flops",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)

"""Lowering rules: which hardware-model function costs each op kind on each kind of device.

:mod:`simulator.lowering.common` holds what every device kind shares (``KernelCost``, the rule
registry, views, collectives, special-function counts); one module per device class registers its
rules: :mod:`~simulator.lowering.gpu` (SMs and tensor cores), :mod:`~simulator.lowering.tpu`
(systolic arrays), :mod:`~simulator.lowering.cpu` (host cores). The engines call :func:`lower`.
"""

from simulator.lowering.collectives import collective_cost
from simulator.lowering.common import (
    COLLECTIVE_KINDS,
    NARROW_GROUP_CHANNELS,
    RULE_MODULES,
    VIEW_KINDS,
    KernelCost,
    LoweringContext,
    Rule,
    RuleSet,
    element_bytes,
    is_narrow_grouped_conv,
    lower,
    register_rule,
    ring_collective,
    rule_name_for,
    ruleset,
    set_fallback,
    sfu_ops,
    zero_cost,
)
from simulator.lowering.gpu import attention_kernel_for

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
]

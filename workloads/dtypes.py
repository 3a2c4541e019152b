"""Numeric data types of tensors, with their storage widths; shared with hwmodels as lowercase strings."""

from __future__ import annotations

from enum import StrEnum

from nodeperf.suggest import near_match

__all__ = ["DType", "dtype_bytes", "parse_dtype"]


class DType(StrEnum):
    """A tensor element type. The value is the lowercase string used everywhere (``"bf16"``)."""

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    FP4_E2M1 = "fp4_e2m1"
    FP8_E8M0 = "fp8_e8m0"
    INT64 = "int64"
    INT32 = "int32"
    INT8 = "int8"
    INT4 = "int4"
    BOOL = "bool"

    @property
    def bits(self) -> int:
        """Storage width in bits (tf32 is stored as 32-bit fp32)."""
        return _BITS[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


_BITS = {
    DType.FP64: 64,
    DType.FP32: 32,
    DType.TF32: 32,
    DType.BF16: 16,
    DType.FP16: 16,
    DType.FP8_E4M3: 8,
    DType.FP8_E5M2: 8,
    DType.FP4_E2M1: 4,  # OCP Microscaling Formats (MX) v1.0, section 5.3.3: E2M1, 1 sign, 2 exponent, 1 mantissa bit
    DType.FP8_E8M0: 8,  # OCP MX v1.0, section 5.4.1: the E8M0 shared scale, an unsigned power of two
    DType.INT64: 64,
    DType.INT32: 32,
    DType.INT8: 8,
    DType.INT4: 4,
    DType.BOOL: 8,
}
_FLOATS = {DType.FP64, DType.FP32, DType.TF32, DType.BF16, DType.FP16, DType.FP8_E4M3, DType.FP8_E5M2, DType.FP4_E2M1,
           DType.FP8_E8M0}
_ALIASES = {
    "float32": DType.FP32,
    "float": DType.FP32,
    "float16": DType.FP16,
    "half": DType.FP16,
    "bfloat16": DType.BF16,
    "float64": DType.FP64,
    "double": DType.FP64,
    "fp8": DType.FP8_E4M3,
    "e4m3": DType.FP8_E4M3,
    "e5m2": DType.FP8_E5M2,
    "e2m1": DType.FP4_E2M1,
    "e8m0": DType.FP8_E8M0,
    "long": DType.INT64,
    "int": DType.INT32,
}


def parse_dtype(value: str | DType, where: str = "dtype") -> DType:
    """Parse a dtype name (``"bf16"``, ``"bfloat16"``...) with a located error and a near match.

    Case and surrounding whitespace are ignored (``" BF16 "`` is bf16); an empty or blank name is an
    error, never a silent default: a caller that has a default applies it before calling.

    Raises
    ------
    ValueError
        ``<where>: unknown dtype; got <value>; expected one of ...[; did you mean <x>?]``.
    """
    if isinstance(value, DType):
        return value
    names = [d.value for d in DType]
    if not isinstance(value, str):
        raise ValueError(f"{where}: not a dtype name; got {value!r} ({type(value).__name__}); expected one of "
                         f"{', '.join(names)}")
    s = value.strip().lower()
    if not s:
        raise ValueError(f"{where}: empty dtype; got {value!r}; expected one of {', '.join(names)}")
    try:
        return DType(s)
    except ValueError:
        pass
    if s in _ALIASES:
        return _ALIASES[s]
    # the near match is sought among the aliases too ('float46' is nearest 'float64'), but named in the vocabulary
    # the message lists: the alias's own dtype ('fp64')
    near = near_match(s, names + list(_ALIASES))
    hint = f"; did you mean {(_ALIASES[near[0]].value if near[0] in _ALIASES else near[0])!r}?" if near else ""
    raise ValueError(f"{where}: unknown dtype; got {value!r}; expected one of {', '.join(names)}" + hint)


def dtype_bytes(value: str | DType, default: float = 2.0) -> float:
    """Bytes an element of dtype ``value`` is stored in (:attr:`DType.bits` / 8: fp8 1, bf16 2, fp32 4);
    ``default`` for an empty or unknown name (a graph or profile that leaves its dtype unstated)."""
    try:
        return parse_dtype(value).bits / 8.0
    except ValueError:
        return default

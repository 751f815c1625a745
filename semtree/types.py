"""Element types and tensor shapes: the vocabulary every stage shares (spec 5.1, 5.2).

`DType` names the element types of Tile; `promote` is the one common-supertype rule
(spec 5.2): the maximum under the total order
bool < i8 < u8 < i16 < u16 < i32 < u32 < i64 < u64 < f16 < f32 < f64.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import reduce
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable


class DType(Enum):
    BOOLEAN = "bool"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def bits(self) -> int:
        return 8 * self.itemsize

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOLEAN

    @property
    def is_integer(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return not self.is_float and not self.is_bool

    @property
    def is_signed(self) -> bool:
        return self.is_float or self.value.startswith("int")

    @property
    def rank(self) -> int:
        """Position in the promotion order (spec 5.2)."""
        return _ORDER.index(self)

    @property
    def short(self) -> str:
        """The spec's spelling: `f32`, `i8`, `u16`, `bool`."""
        return _SHORT[self]

    @property
    def min(self) -> int | float:
        return _limits(self)[0]

    @property
    def max(self) -> int | float:
        return _limits(self)[1]

    @staticmethod
    def of(value: object) -> DType:
        """A DType from a DType, a numpy dtype or scalar type, or a name (`"float32"`, `"f32"`)."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str) and value in _BY_SHORT:
            return _BY_SHORT[value]
        try:
            name = np.dtype(value).name  # type: ignore[call-overload]
        except TypeError as err:
            raise TypeError(f"not an element type: {value!r}") from err
        try:
            return DType(name)
        except ValueError:
            raise TypeError(f"element type {name!r} is not supported by Tile") from None

    def __str__(self) -> str:
        return self.short


_ORDER = (
    DType.BOOLEAN,
    DType.INT8,
    DType.UINT8,
    DType.INT16,
    DType.UINT16,
    DType.INT32,
    DType.UINT32,
    DType.INT64,
    DType.UINT64,
    DType.FLOAT16,
    DType.FLOAT32,
    DType.FLOAT64,
)
_FLOATS = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64})
_SHORT = {
    DType.BOOLEAN: "bool",
    DType.INT8: "i8",
    DType.INT16: "i16",
    DType.INT32: "i32",
    DType.INT64: "i64",
    DType.UINT8: "u8",
    DType.UINT16: "u16",
    DType.UINT32: "u32",
    DType.UINT64: "u64",
    DType.FLOAT16: "f16",
    DType.FLOAT32: "f32",
    DType.FLOAT64: "f64",
}
_BY_SHORT = {short: dtype for dtype, short in _SHORT.items()}


def _limits(dtype: DType) -> tuple[int | float, int | float]:
    if dtype.is_bool:
        return 0, 1
    if dtype.is_float:
        info = np.finfo(dtype.numpy)
        return float(info.min), float(info.max)
    iinfo = np.iinfo(dtype.numpy)
    return int(iinfo.min), int(iinfo.max)


def promote(*dtypes: DType | Iterable[DType]) -> DType:
    """The common supertype of one or more element types (spec 5.2)."""
    flat: list[DType] = []
    for item in dtypes:
        if isinstance(item, DType):
            flat.append(item)
        else:
            flat.extend(item)
    if not flat:
        raise ValueError("promote() needs at least one type")
    return reduce(lambda a, b: a if a.rank >= b.rank else b, flat)


@dataclass(frozen=True, slots=True)
class TensorShape:
    """Element type, sizes (outermost first) and strides in elements (row-major by default)."""

    dtype: DType
    dims: tuple[int, ...]
    strides: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.strides:
            object.__setattr__(self, "strides", row_major_strides(self.dims))
        if len(self.strides) != len(self.dims):
            raise ValueError(f"{len(self.dims)} dims but {len(self.strides)} strides")

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        """Element count (1 for a 0-D tensor)."""
        count = 1
        for dim in self.dims:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.short}[{', '.join(str(d) for d in self.dims)}]"


def row_major_strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for dim in reversed(dims):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))

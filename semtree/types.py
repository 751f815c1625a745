"""Element types, kernel types and tensor shapes: the vocabulary every stage shares.

`DType` names the element types of Tile (spec 5.1); `promote` is the one common-supertype rule
(spec 5.2): the maximum under the total order
bool < i8 < u8 < i16 < u16 < i32 < u32 < i64 < u64 < f16 < f32 < f64.
`TensorShape` describes a bound tensor (design 3.3). `Type`, with `TypeBase` and
`Region`, is the type of a semtree value, variable or pointer (design 4.1); the rules
that combine them live in `semtree.typing`.
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


class TypeBase(Enum):
    VOID = "void"
    INDEX = "index"  # loop counters and work-item ids (design 4.4 rule 10)
    VALUE = "value"  # a scalar or vector of `dtype`
    POINTER_MUT = "ptr"  # pointer to VALUE elements, writable
    POINTER_CONST = "cptr"  # pointer to VALUE elements, read-only


class Region(Enum):
    PRIVATE = "private"  # registers / stack
    LOCAL = "local"  # shared by a work-group (OpenCL __local)
    GLOBAL = "global"  # device buffers (OpenCL __global)


VECTOR_WIDTHS = (1, 2, 3, 4, 8, 16)
_POINTERS = frozenset({TypeBase.POINTER_MUT, TypeBase.POINTER_CONST})


@dataclass(frozen=True, slots=True)
class Type:
    """The type of a semtree value, variable, array or pointer.

    For pointers, `dtype` and `vec_width` describe the pointed-to elements and `region` the
    memory they point into. For declarations, `array > 0` makes an array of that many elements
    and `region` says where the variable lives (an array of pointers lives in private memory;
    its `region` is that of the pointees).
    """

    base: TypeBase
    dtype: DType | None = None
    vec_width: int = 1
    array: int = 0
    region: Region = Region.PRIVATE

    def __post_init__(self) -> None:
        needs_dtype = self.base is TypeBase.VALUE or self.base in _POINTERS
        if needs_dtype and self.dtype is None:
            raise ValueError(f"a {self.base.value} type needs a dtype")
        if not needs_dtype and self.dtype is not None:
            raise ValueError(f"a {self.base.value} type has no dtype")
        if self.vec_width not in VECTOR_WIDTHS:
            raise ValueError(f"vector width {self.vec_width} is not one of {VECTOR_WIDTHS}")
        if self.vec_width != 1 and not needs_dtype:
            raise ValueError(f"a {self.base.value} type cannot be a vector")
        if self.array < 0:
            raise ValueError(f"negative array size {self.array}")
        if self.array and self.base is TypeBase.VOID:
            raise ValueError("an array of void")

    # ---- constructors ------------------------------------------------------------------

    @staticmethod
    def void() -> Type:
        return _VOID

    @staticmethod
    def index() -> Type:
        return _INDEX

    @staticmethod
    def value(dtype: DType, vec: int = 1) -> Type:
        return Type(TypeBase.VALUE, dtype, vec)

    @staticmethod
    def boolean(vec: int = 1) -> Type:
        return Type(TypeBase.VALUE, DType.BOOLEAN, vec)

    @staticmethod
    def ptr(
        dtype: DType, vec: int = 1, const: bool = False, region: Region = Region.GLOBAL
    ) -> Type:
        base = TypeBase.POINTER_CONST if const else TypeBase.POINTER_MUT
        return Type(base, dtype, vec, region=region)

    # ---- predicates --------------------------------------------------------------------

    @property
    def is_void(self) -> bool:
        return self.base is TypeBase.VOID

    @property
    def is_index(self) -> bool:
        return self.base is TypeBase.INDEX and not self.array

    @property
    def is_value(self) -> bool:
        return self.base is TypeBase.VALUE and not self.array

    @property
    def is_pointer(self) -> bool:
        return self.base in _POINTERS and not self.array

    @property
    def base_is_pointer(self) -> bool:
        """A pointer, or an array of pointers."""
        return self.base in _POINTERS

    @property
    def is_const(self) -> bool:
        return self.base is TypeBase.POINTER_CONST

    @property
    def is_array(self) -> bool:
        return self.array > 0

    @property
    def is_vector(self) -> bool:
        return self.vec_width > 1

    @property
    def is_float(self) -> bool:
        return self.is_value and self.dtype is not None and self.dtype.is_float

    @property
    def is_bool(self) -> bool:
        return self.is_value and self.dtype is DType.BOOLEAN

    @property
    def is_integer(self) -> bool:
        """An integer value (signed or unsigned, not bool) or an index."""
        if self.is_index:
            return True
        return self.is_value and self.dtype is not None and self.dtype.is_integer

    @property
    def is_numeric(self) -> bool:
        """A value or index that arithmetic accepts (not void, pointer or array)."""
        return self.is_index or self.is_value

    # ---- derived types -----------------------------------------------------------------

    def element(self) -> Type:
        """The type of `self[i]`: the element of an array, or the pointee of a pointer."""
        if self.is_array:
            # An array of pointers keeps the pointees' region; other elements are values.
            region = self.region if self.base in _POINTERS else Region.PRIVATE
            return Type(self.base, self.dtype, self.vec_width, region=region)
        if self.is_pointer:
            assert self.dtype is not None
            return Type.value(self.dtype, self.vec_width)
        raise TypeError(f"{self} cannot be subscripted")

    def with_base(self, base: TypeBase) -> Type:
        return Type(base, self.dtype, self.vec_width, self.array, self.region)

    def with_width(self, vec: int) -> Type:
        return Type(self.base, self.dtype, vec, self.array, self.region)

    def with_dtype(self, dtype: DType) -> Type:
        return Type(self.base, dtype, self.vec_width, self.array, self.region)

    def scalar(self) -> Type:
        return self.with_width(1)

    def __str__(self) -> str:
        if self.base is TypeBase.VOID:
            text = "void"
        elif self.base is TypeBase.INDEX:
            text = "index"
        else:
            assert self.dtype is not None
            text = self.dtype.short + (f"x{self.vec_width}" if self.vec_width > 1 else "")
            if self.base in _POINTERS:
                const = "const " if self.base is TypeBase.POINTER_CONST else ""
                text = f"{self.region.value} {const}{text}*"
        if self.array:
            text = f"{text}[{self.array}]"
            if self.region is not Region.PRIVATE and self.base not in _POINTERS:
                text = f"{self.region.value} {text}"
        return text


_VOID = Type(TypeBase.VOID)
_INDEX = Type(TypeBase.INDEX)

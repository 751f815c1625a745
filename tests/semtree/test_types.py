"""Kernel types (design 4.1) next to the existing element types."""

from __future__ import annotations

import pytest

from semtree.types import DType, Region, TensorShape, Type, TypeBase, promote

F16, F32 = DType.FLOAT16, DType.FLOAT32


def test_existing_names_keep_working() -> None:
    assert promote(DType.INT8, DType.UINT8) == DType.UINT8
    assert TensorShape(F32, (2, 3)).strides == (3, 1)
    assert DType.of("f32") is F32


def test_constructors() -> None:
    assert Type.void() == Type(TypeBase.VOID)
    assert Type.index() == Type(TypeBase.INDEX)
    assert Type.value(F32, 4) == Type(TypeBase.VALUE, F32, 4)
    assert Type.boolean(8) == Type(TypeBase.VALUE, DType.BOOLEAN, 8)
    assert Type.ptr(F32) == Type(TypeBase.POINTER_MUT, F32, 1, 0, Region.GLOBAL)
    assert Type.ptr(F16, 2, const=True, region=Region.LOCAL) == Type(
        TypeBase.POINTER_CONST, F16, 2, 0, Region.LOCAL
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((TypeBase.VALUE,), "needs a dtype"),
        ((TypeBase.POINTER_MUT,), "needs a dtype"),
        ((TypeBase.INDEX, F32), "has no dtype"),
        ((TypeBase.VALUE, F32, 5), "vector width 5"),
        ((TypeBase.INDEX, None, 4), "cannot be a vector"),
        ((TypeBase.VALUE, F32, 1, -1), "negative array"),
        ((TypeBase.VOID, None, 1, 4), "array of void"),
    ],
)
def test_invalid_types(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Type(*args)


def test_predicates() -> None:
    vector, pointer = Type.value(F32, 4), Type.ptr(DType.INT8, const=True)
    array = Type(TypeBase.VALUE, F32, 4, 8, Region.LOCAL)
    pointers = Type(TypeBase.POINTER_MUT, F32, array=2, region=Region.GLOBAL)
    assert vector.is_value and vector.is_vector and vector.is_float and vector.is_numeric
    assert not vector.is_pointer and not vector.is_array and not vector.is_integer
    assert pointer.is_pointer and pointer.is_const and not pointer.is_numeric
    assert not pointer.is_integer and pointer.base_is_pointer
    assert array.is_array and not array.is_value and not array.is_numeric
    assert pointers.is_array and pointers.base_is_pointer and not pointers.is_pointer
    assert Type.index().is_integer and Type.index().is_numeric and not Type.index().is_value
    assert Type.value(DType.UINT8).is_integer and not Type.boolean().is_integer
    assert Type.boolean().is_bool and Type.void().is_void


def test_derived_types() -> None:
    array = Type(TypeBase.VALUE, F32, 4, 8, Region.LOCAL)
    assert array.element() == Type.value(F32, 4)
    assert Type.ptr(F32, 8).element() == Type.value(F32, 8)
    pointers = Type(TypeBase.POINTER_CONST, F32, array=2, region=Region.GLOBAL)
    assert pointers.element() == Type.ptr(F32, const=True)
    with pytest.raises(TypeError):
        Type.value(F32).element()
    assert Type.value(F32, 4).scalar() == Type.value(F32)
    assert Type.value(F32).with_width(8) == Type.value(F32, 8)
    assert Type.value(F32).with_dtype(F16) == Type.value(F16)
    assert Type.ptr(F32).with_base(TypeBase.POINTER_CONST) == Type.ptr(F32, const=True)


@pytest.mark.parametrize(
    ("type_", "text"),
    [
        (Type.void(), "void"),
        (Type.index(), "index"),
        (Type.value(F32), "f32"),
        (Type.value(DType.UINT8, 16), "u8x16"),
        (Type.ptr(F32, 4), "global f32x4*"),
        (Type.ptr(F16, const=True, region=Region.LOCAL), "local const f16*"),
        (Type(TypeBase.VALUE, F32, array=8), "f32[8]"),
        (Type(TypeBase.VALUE, F32, 2, 8, Region.LOCAL), "local f32x2[8]"),
        (Type(TypeBase.POINTER_CONST, F32, array=3, region=Region.GLOBAL), "global const f32*[3]"),
        (Type(TypeBase.INDEX, array=2), "index[2]"),
    ],
)
def test_str(type_: Type, text: str) -> None:
    assert str(type_) == text

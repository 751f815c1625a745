"""Binding: shapes, element types, constant folding and the errors of spec 5-9."""

from __future__ import annotations

import numpy as np
import pytest

import tile
from semtree.types import DType, TensorShape
from tile.bind.program import ConstBinding, OpKind


def arr(dtype: str, *shape: int) -> np.ndarray:
    return np.zeros(shape or (2,), dtype=dtype)


def out(source: str, **inputs: object) -> tuple[tuple[int, ...], str]:
    bound = tile.Function(source).bind(inputs)
    shape, dtype = bound.outputs["O"]
    return shape, dtype.name


def error(source: str, **inputs: object) -> tile.TileError:
    with pytest.raises(tile.TileError) as caught:
        tile.Function(source).bind(inputs)
    return caught.value


# ---- element types (spec 5.2, 5.3, 7.3; observed list of spec 12 items 23-24) -------------

PROMOTIONS = [
    ("int32", "float32", "float32"),
    ("float32", "int32", "float32"),
    ("int8", "int32", "int32"),
    ("uint8", "int8", "uint8"),
    ("int8", "uint8", "uint8"),
    ("uint8", "int16", "int16"),
    ("int32", "uint32", "uint32"),
    ("uint32", "int32", "uint32"),
    ("int64", "float32", "float32"),
    ("float16", "float32", "float32"),
    ("float64", "float32", "float64"),
    ("float16", "int64", "float16"),
    ("uint64", "int32", "uint64"),
    ("int8", "bool", "int8"),
    ("bool", "float32", "float32"),
]


@pytest.mark.parametrize(("left", "right", "expected"), PROMOTIONS)
def test_promotion(left: str, right: str, expected: str) -> None:
    source = "function (A, B) -> (O) { O = A + B; }"
    assert out(source, A=arr(left), B=arr(right)) == ((2,), expected)


@pytest.mark.parametrize(
    ("dtype", "expression", "expected"),
    [
        ("int8", "A + 1", "int32"),
        ("uint8", "A + 1", "int32"),
        ("int64", "A + 1", "int64"),
        ("float16", "A + 1", "float16"),
        ("float16", "A * 2.5", "float32"),
        ("float64", "A * 2.5", "float64"),
        ("int32", "A + 3000000000", "int64"),
        ("int32", "A < 2", "bool"),
        ("int8", "abs(A)", "int8"),
        ("int8", "max(A, 0)", "int32"),
        ("int32", "relu(A)", "float32"),
        ("float16", "relu(A)", "float32"),
        ("float64", "relu(A)", "float64"),
        ("int8", "A ? A : 2", "int32"),
        ("int32", "as_uint(A, 32)", "uint32"),
        ("float32", "as_int(A, 16 * 2)", "int32"),
        ("float32", "as_bool(A, 1)", "bool"),
        ("int32", "index(A, 0)", "int32"),
        ("float32", "-A", "float32"),
        ("uint8", "-A", "uint8"),
        ("int32", "~A", "int32"),
        ("int32", "A >> 1", "int32"),
    ],
)
def test_expression_types(dtype: str, expression: str, expected: str) -> None:
    assert out(f"function (A) -> (O) {{ O = {expression}; }}", A=arr(dtype))[1] == expected


@pytest.mark.parametrize(
    ("dtype", "expression", "code"),
    [
        ("bool", "A + A", "E-TYPE"),
        ("bool", "-A", "E-TYPE"),
        ("float32", "A & A", "E-TYPE"),
        ("bool", "A | A", "E-TYPE"),
        ("int32", "exp(A)", "E-TYPE"),
        ("int32", "sigmoid(A)", "E-TYPE"),
        ("int32", "pow(A, 2)", "E-TYPE"),
        ("float32", "mod(A, 2)", "E-TYPE"),
        ("float32", "as_float(A, 8)", "E-ARG"),
        ("float32", "as_int(A, A)", "E-ARG"),
        ("float32", "index(A, 1)", "E-ARG"),
        ("float32", "reshape(A, 3)", "E-SHAPE"),
        ("float32", "reshape(A, 2.0)", "E-ARG"),
    ],
)
def test_expression_errors(dtype: str, expression: str, code: str) -> None:
    assert error(f"function (A) -> (O) {{ O = {expression}; }}", A=arr(dtype)).code == code


# ---- broadcasting (spec 7.2) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ((2, 3), (3,), (2, 3)),
        ((2, 1), (3,), (2, 3)),
        ((3,), (2, 1), (2, 3)),
        ((2, 1, 3), (4, 1), (2, 4, 3)),
        ((1,), (3,), (3,)),
    ],
)
def test_broadcasting(left: tuple, right: tuple, expected: tuple) -> None:
    source = "function (A, B) -> (O) { O = A + B; }"
    assert out(source, A=arr("float32", *left), B=arr("float32", *right))[0] == expected


def test_broadcast_mismatch_names_both_operands() -> None:
    err = error(
        "function (A, B) -> (O) {\n  O = A + B;\n}",
        A=arr("float32", 2, 3),
        B=arr("float32", 2),
    )
    assert err.code == "E-SHAPE"
    assert (err.line, err.column) == (2, 9)
    assert "'A' (f32[2, 3])" in err.message and "'B' (f32[2])" in err.message


def test_zero_d_broadcasts() -> None:
    source = "function (A) -> (O) { S[] = +(A[i]); O = A / S; }"
    assert out(source, A=arr("float32", 4)) == ((4,), "float32")


# ---- constants (spec 7.6) -----------------------------------------------------------------


def constant(expression: str, **inputs: object) -> ConstBinding:
    bound = tile.Function(
        f"function (A[N]) -> (O) {{ C = {expression}; O[i: N] = +(A[i]); }}"
    ).bind({"A": arr("float32", 5), **inputs})
    value = bound.bindings.get("C")
    assert value is None  # named constants are folded away, never ops
    source = f"function (A[N]) -> (C) {{ C = {expression}; }}"
    bound = tile.Function(source).bind({"A": arr("float32", 5), **inputs})
    (op,) = bound.ops
    return bound.bindings[op.inputs[0]]  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("expression", "value", "dtype"),
    [
        ("N / 2", 2, DType.INT32),
        ("(N + 1) / 2", 3, DType.INT32),
        ("-N + 7", 2, DType.INT32),
        ("min(N, 2)", 2, DType.INT32),
        ("N == 5", 1, DType.BOOLEAN),
        ("N > 2 ? 4 : 1", 4, DType.INT32),
        ("mod(N, 2)", 1, DType.INT32),
        ("mod(-7, 3)", -1, DType.INT32),
        ("-7 / 2", -3, DType.INT32),
        ("7.0 / 2", 3.5, DType.FLOAT32),
        ("2147483647 + 1", -2147483648, DType.INT32),
        ("1 << 4 | 1", 17, DType.INT32),
        ("~0", -1, DType.INT32),
        ("broadcast(1, N)", 5, DType.INT32),
        ("abs(-3)", 3, DType.INT32),
        ("floor(2.5)", 2.0, DType.FLOAT32),
        ("3000000000 * 2", 6000000000, DType.INT64),
    ],
)
def test_folding(expression: str, value: object, dtype: DType) -> None:
    binding = constant(expression)
    assert binding == ConstBinding(value, dtype)  # type: ignore[arg-type]


def test_float_constants_round_to_floatx() -> None:
    binding = constant("1.0 / 3.0")
    assert binding.value == float(np.float32(1.0) / np.float32(3.0))


@pytest.mark.parametrize(
    ("expression", "code"),
    [("N / 0", "E-CONST"), ("mod(N, 0)", "E-CONST"), ("assert_small(N < 2)", "E-ASSERT")],
)
def test_folding_errors(expression: str, code: str) -> None:
    source = f"function (A[N]) -> (O) {{ C = {expression}; O = A; }}"
    assert error(source, A=arr("float32", 5)).code == code


def test_unfoldable_constant_is_a_0d_tensor() -> None:
    assert out("function () -> (O) { O = exp(1.0); }") == ((), "float32")


def test_constant_output_is_materialised() -> None:
    assert out("function (A[M, N]) -> (O) { O = M * N; }", A=arr("int8", 2, 3)) == ((), "int32")
    assert out("function () -> (O) { O = 3; }") == ((), "int32")


def test_constant_inputs() -> None:
    source = "function (A[N], K) -> (O) { O[i: K] = +(A[i + K - 4]), i < K - 3; }"
    assert out(source, A=arr("float32", 3), K=np.array(5, np.int32)) == ((5,), "float32")
    assert out(source, A=arr("float32", 3), K=5) == ((5,), "float32")
    err = error(source, A=arr("float32", 3), K=2.5)
    assert err.code == "E-CONST"
    assert out("function (A, K) -> (O) { O = A + K; }", A=arr("int8"), K=2.5)[1] == "float32"


# ---- contractions (spec 8) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "shapes", "expected"),
    [
        ("O[i, j: M, N] = +(A[i, k] * B[k, j]);", {"A": (2, 3), "B": (3, 4)}, ((2, 4), "float32")),
        ("O[] = +(A[i, j]);", {"A": (2, 3)}, ((), "float32")),
        ("O[:] = +(A[i, j]);", {"A": (2, 3)}, ((), "float32")),
        ("O[i: (N + 1) / 2] = >(A[2 * i + j]), j < 2;", {"A": (5,)}, ((3,), "float32")),
        ("O[i: N] = =(A[i] == B[i]);", {"A": (3,), "B": (3,)}, ((3,), "bool")),
        ("O[2 * x + k: 2 * N + 1] = +(A[x] * B[k]);", {"A": (3,), "B": (3,)}, ((7,), "float32")),
        ("O[i: 6] = +(A[i / 2]);", {"A": (3,)}, ((6,), "float32")),
        ("O[i: N] = +(A[k]), i - k < N;", {"A": (4,)}, ((4,), "float32")),
    ],
)
def test_contraction_shapes(source: str, shapes: dict, expected: tuple) -> None:
    names = ", ".join(shapes)
    text = f"function ({names}) -> (O) {{ {source} }}"
    header = {
        "A": "A[N]" if len(shapes["A"]) == 1 else "A[M, K]",
        "B": "B[K, N]" if len(shapes.get("B", ())) == 2 else "B[L]",
    }
    text = f"function ({', '.join(header[n] for n in shapes)}) -> (O) {{ {source} }}"
    inputs = {n: arr("float32", *s) for n, s in shapes.items()}
    assert out(text, **inputs) == expected


def test_contraction_result_types() -> None:
    source = "function (A[N], B[N]) -> (O) { O[i: N] = +(A[i] * B[i]); }"
    assert out(source, A=arr("int16", 3), B=arr("uint8", 3))[1] == "int16"
    cond = "function (A[N], B[N], V[N]) -> (O) { O[i: N] = +(A[i] == B[j] ? V[j]); }"
    assert out(cond, A=arr("float32", 3), B=arr("float32", 3), V=arr("int32", 3))[1] == "float32"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("O[i: N] = +(A[i + j - k]);", "E-UNBOUNDED"),
        ("O[i + j: 5] = +(A[i + j]);", "E-UNBOUNDED"),
        ("O[] = +(A[5]);", "E-EMPTY"),
        ("O[i: N] = +(A[i]), i < 0;", "E-EMPTY"),
        ("O[i: N] = +(A[i]), 5 < 3;", "E-EMPTY"),
        ("O[i: N] = +(A[i + N / 2]);", "E-EMPTY"),
        ("O[i: N] = +(A[i * j]);", "E-INDEX"),
        ("O[i: N] = +(A[i / j]);", "E-INDEX"),
        ("O[i: N] = +(A[i / 0]);", "E-INDEX"),
        ("O[i: 0] = +(A[i]);", "E-CONST"),
        ("O[i: N] = +(A[i]), i < 2.5;", "E-CONST"),
        ("O[i: N] = +(A[i, j]);", "E-SHAPE"),
        ("O[i: N] = +(A[i]) default A;", None),
        ("O[i: 6] = +(A[i]) default A;", "E-SHAPE"),
        ("O[i: N] = +(A[i] == A[i]);", "E-TYPE"),
        ("O[i: N] = =(A[i] == A[i]);", None),
        ("O[i: N] = +(A[i + B]);", "E-CONST"),
    ],
)
def test_contraction_errors(body: str, code: str | None) -> None:
    source = f"function (A[N], B) -> (O) {{ {body} }}"
    inputs = {"A": arr("float32", 5), "B": arr("float32", 2)}
    if code is None:
        tile.Function(source).bind(inputs)
    else:
        assert error(source, **inputs).code == code


def test_constraint_constant_holds_is_dropped() -> None:
    bound = tile.Function("function (A[N]) -> (O) { O[i: N] = +(A[i]), 3 < 5; }").bind(
        A=arr("float32", 5)
    )
    (op,) = bound.ops
    assert op.kind is OpKind.CONTRACTION and op.contraction is not None
    assert op.contraction.constraints == ()


# ---- binding the header (spec 6) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        ({"A": arr("float32", 3)}, "input 'B' is not bound"),
        ({"A": arr("float32", 3), "B": arr("float32", 2)}, "size 'N' is 3"),
        ({"A": arr("float32", 3, 1), "B": arr("float32", 3)}, "has 1 dimension"),
        ({"A": np.float32(2), "B": arr("float32", 3)}, "scalar constant"),
        ({"A": arr("complex64", 3), "B": arr("float32", 3)}, "does not support"),
        ({"A": arr("float32", 0), "B": arr("float32", 3)}, "zero-sized"),
        ({"A": arr("float32", 3), "B": arr("float32", 3), "C": 1}, "no input named 'C'"),
        ({"A": "text", "B": arr("float32", 3)}, "numpy array or a number"),
    ],
)
def test_bind_errors(inputs: dict, fragment: str) -> None:
    err = error("function (A[N], B[N]) -> (O) { O = A + B; }", **inputs)
    assert err.code == "E-BIND"
    assert isinstance(err, tile.TileBindError)
    assert fragment in str(err)


def test_bind_accepts_shapes_without_data() -> None:
    shape = TensorShape(DType.FLOAT16, (4, 5))
    assert out("function (A) -> (O) { O = A * 2; }", A=shape) == ((4, 5), "float16")


def test_output_that_is_an_input() -> None:
    assert out("function (O) -> (O) { }", O=arr("int8", 3)) == ((3,), "int8")


def test_bind_never_touches_arrays() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    before = data.copy()
    data.flags.writeable = False
    tile.Function("function (A) -> (O) { O = A * 2; }").bind(A=data)
    assert np.array_equal(data, before)


# ---- builtins with special shapes (spec 9.5, 9.6, 9.7, 9.8) --------------------------------


@pytest.mark.parametrize(
    ("expression", "inputs", "expected"),
    [
        ("reshape(A, 3, 2)", {"A": ("float32", (2, 3))}, ((3, 2), "float32")),
        ("reshape(A)", {"A": ("float32", (1, 1))}, ((), "float32")),
        ("shape(A)", {"A": ("int8", (2, 3, 4))}, ((3,), "int32")),
        (
            "gather(A, I)",
            {"A": ("float32", (4, 2)), "I": ("int32", (2, 2))},
            ((2, 2, 2), "float32"),
        ),
        ("gather(A, I)", {"A": ("float32", (4, 2)), "I": ("int32", ())}, ((2,), "float32")),
        (
            "scatter(A, I, B)",
            {"A": ("float32", (3, 2)), "I": ("int32", (3,)), "B": ("float32", (4, 2))},
            ((4, 2), "float32"),
        ),
        ("simple_reduce(A, 1, 3)", {"A": ("float32", (2, 3))}, ((1, 3), "float32")),
        ("simple_reduce(A, 3)", {"A": ("float32", (2, 3))}, ((3,), "float32")),
        ("builtin_softmax(A, 2, 3)", {"A": ("float32", (2, 3))}, ((2, 3), "float32")),
        ("builtin_logsoftmax(A, 2, 3)", {"A": ("float64", (2, 3))}, ((2, 3), "float64")),
        (
            "builtin_binary_crossentropy(A, B, 1)",
            {"A": ("float32", (2,)), "B": ("float32", (2,))},
            ((2,), "float32"),
        ),
        ("reverse_grad(A, 1)", {"A": ("int8", (2,))}, ((2,), "int8")),
        ("element(tuple(A, B), 1)", {"A": ("int8", (2,)), "B": ("int16", (3,))}, ((3,), "int16")),
    ],
)
def test_special_builtins(expression: str, inputs: dict, expected: tuple) -> None:
    names = ", ".join(inputs)
    source = f"function ({names}) -> (O) {{ O = {expression}; }}"
    arrays = {n: np.zeros(s, dtype=d) for n, (d, s) in inputs.items()}
    assert out(source, **arrays) == expected


def test_prng() -> None:
    state = np.zeros((3, 2048), np.uint32)
    source = (
        "function (S) -> (O, N) { X = prng_step(S, 2, 3); O = prng_value(X); N = prng_state(X); }"
    )
    bound = tile.Function(source).bind(S=state)
    assert bound.outputs["O"] == ((2, 3), np.dtype("float32"))
    assert bound.outputs["N"] == ((3, 2048), np.dtype("uint32"))
    only_state = "function (S) -> (N) { X = prng_step(S, 4); N = prng_state(X); }"
    (op,) = tile.Function(only_state).bind(S=state).ops
    assert op.fn == "ident"  # nothing was drawn: the state passes through
    bad = "function (S) -> (O) { X = prng_step(S, 4); O = X + 1; }"
    assert error(bad, S=state).code == "E-TYPE"
    assert error("function (S) -> (X) { X = prng_step(S, 4); }", S=state).code == "E-TYPE"
    assert (
        error(
            "function (S) -> (O) { X = prng_step(S, 4); O = prng_value(X); }",
            S=np.zeros((3, 4), np.uint32),
        ).code
        == "E-SHAPE"
    )


def test_gather_needs_int32_index() -> None:
    source = "function (V, I) -> (O) { O = gather(V, I); }"
    assert error(source, V=arr("float32", 2, 2), I=arr("int64", 2)).code == "E-ARG"


# ---- every independent error is reported ---------------------------------------------------


def test_errors_in_several_statements() -> None:
    source = "function (A, B) -> (O) {\n  X = A + B;\n  Y = exp(A);\n  O = A & 1.5;\n}"
    err = error(source, A=arr("int32", 2, 3), B=arr("float32", 2))
    assert [(d.code, d.line) for d in err.diagnostics] == [
        ("E-SHAPE", 2),
        ("E-TYPE", 3),
        ("E-TYPE", 4),
    ]


def test_failed_statement_does_not_cascade() -> None:
    source = "function (A, B) -> (O) {\n  X = A + B;\n  O = X * 2;\n}"
    err = error(source, A=arr("float32", 2, 3), B=arr("float32", 2))
    assert len(err.diagnostics) == 1


def test_str_of_bound_program() -> None:
    bound = tile.Function(
        "function (A[M, K], B[K, N]) -> (C) { C[m, n: M, N] = +(A[m, k] * B[k, n]); }"
    ).bind(A=arr("float32", 2, 3), B=arr("float32", 3, 4))
    text = str(bound)
    assert "C" in text and "f32[2, 4]" in text and "A[m, k]" in text


def test_constant_input_returned_as_output() -> None:
    bound = tile.Function("function (K) -> (K) { }").bind(K=5)
    assert bound.outputs == {"K": ((), np.dtype("int32"))}
    assert isinstance(bound.input_bindings["K"], ConstBinding)
    (op,) = bound.ops
    assert op.output == "K" and op.fn == "ident"

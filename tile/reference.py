"""An independent reference evaluator of bound programs, written from the spec with numpy.

`evaluate(bound, inputs)` computes every output of a `BoundProgram` (what `tile.bind.binder` makes
of a function and its inputs) op by op, straight from the language specification, without the kernel
generator (`tile.lower.flatten`, `tile.lower.fuse`, `tile.gen_*`), the kernel IR (`semtree` beyond
the `DType` names) or any device. It is the judge when devices disagree (`tile run --check`) and the
yardstick of tests.

Arithmetic:

* floats: every value of a float type is held and computed in float64, never rounded to
  f32 or f16 in between, and outputs are returned as float64 (devices round each operation,
  so compare with a tolerance fitting the output's type);
* integers and bools: exact, in their own type (spec 5.4, 7.4): wrapping arithmetic,
  division truncating toward zero with `x / 0 == 0` and `MIN / -1 == MIN`, shift counts modulo
  the bit width, comparisons in the promoted type; outputs in their own dtype;
* conversions (spec 5.4): integers wrap, floats truncate toward zero (saturating where out of
  range, which the spec leaves to the implementation; NaN gives 0), anything to bool is
  `x != 0`;
* contractions (spec 8.4-8.9): the valid tuples are enumerated over the index box of
  `tile.bind.bounds` in chunks, vectorised: a tuple is valid when every access and constraint
  polynomial is an integer in its range; values combine by 8.5 and aggregate with
  `np.add.at` and friends; unwritten elements are 0 or the default's;
* `prng_value`/`prng_state` follow the lane algorithm of spec 9.6 bit for bit.

`evaluate_function(function, inputs)` binds a source text or `tile.bind.function.Function` first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from semtree.types import DType
from tile.bind.bounds import index_bounds
from tile.bind.function import Function
from tile.bind.polynomial import RangeConstraint
from tile.bind.program import ConstBinding, OpKind, TensorBinding
from tile.lang.syntax import AggOp, CombOp

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from tile.bind.polynomial import Polynomial
    from tile.bind.program import BoundContraction, BoundOp, BoundProgram

__all__ = ["ReferenceUnsupported", "evaluate", "evaluate_function", "valid_tuples", "work"]

# Tuples enumerated at once: a few arrays of this many int64 per variable and access.
CHUNK = 1 << 16

# Spec 5.2: promote is the maximum under this order.
_ORDER = (
    *(DType.BOOLEAN, DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32),
    *(DType.UINT32, DType.INT64, DType.UINT64, DType.FLOAT16, DType.FLOAT32, DType.FLOAT64),
)


class ReferenceUnsupported(Exception):  # noqa: N818 (named like tile.TileUnsupported)
    """The program uses something the reference evaluator does not define."""


def evaluate(bound: BoundProgram, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of `bound` for `inputs` (arrays for the tensor inputs; constant inputs
    were folded in when binding and need not be given). Float outputs are float64; the
    others have the output's own dtype."""
    env = _Environment(bound)
    for name in bound.inputs:
        binding = bound.input_bindings.get(name, bound.bindings[name])
        if isinstance(binding, TensorBinding):
            env.set_input(name, np.asarray(inputs[name]), binding)
    with np.errstate(all="ignore"):
        for op in bound.ops:
            env.values[op.output] = _run(env, op)
    return {name: env.get(name) for name in bound.output_names}


def evaluate_function(
    function: Function | str, inputs: Mapping[str, object], floatx: object = "float32"
) -> dict[str, np.ndarray]:
    """Bind `function` (a `tile.bind.function.Function` or its source) to `inputs` as
    `Function.bind` does (0-d arrays and numbers are constants) and evaluate it."""
    if isinstance(function, str):
        function = Function(function, floatx=floatx)
    bound = function.bind(inputs)
    arrays = {name: np.asarray(value) for name, value in inputs.items()}
    return evaluate(bound, arrays)


# ---- values -----------------------------------------------------------------------------------


class _Environment:
    """Every value computed so far, in its representation (float64 for float types)."""

    def __init__(self, bound: BoundProgram) -> None:
        self.bound = bound
        self.values: dict[str, np.ndarray] = {}

    def dtype(self, name: str) -> DType:
        binding = self.bound.bindings[name]
        if name in self.bound.input_bindings and name not in self.values:
            binding = self.bound.input_bindings[name]
        return binding.dtype if isinstance(binding, ConstBinding) else binding.shape.dtype

    def dims(self, name: str) -> tuple[int, ...]:
        binding = self.bound.bindings[name]
        return binding.shape.dims if isinstance(binding, TensorBinding) else ()

    def get(self, name: str) -> np.ndarray:
        if name in self.values:
            return self.values[name]
        binding = self.bound.input_bindings.get(name, self.bound.bindings[name])
        if not isinstance(binding, ConstBinding):
            raise ReferenceUnsupported(f"'{name}' is read before it is computed")
        return _represent(np.array(binding.value), binding.dtype)

    def set_input(self, name: str, array: np.ndarray, binding: TensorBinding) -> None:
        if array.shape != binding.shape.dims:
            raise ValueError(f"input '{name}' has shape {array.shape}, not {binding.shape}")
        self.values[name] = _represent(array, binding.shape.dtype)


def _represent(array: np.ndarray, dtype: DType) -> np.ndarray:
    """`array`, holding values of `dtype`, in the evaluator's representation."""
    return array.astype(np.float64 if dtype.is_float else dtype.numpy)


def _promote(*dtypes: DType) -> DType:
    return max(dtypes, key=_ORDER.index)


def _convert(values: np.ndarray, source: DType, target: DType) -> np.ndarray:
    """Spec 5.4: represented `values` of type `source` as values of type `target`."""
    if target.is_bool:
        return values != 0  # NaN is true
    if target.is_float:
        return values.astype(np.float64)
    if not source.is_float:
        return values.astype(target.numpy)  # two's-complement wrap or extension
    whole = np.trunc(values)
    whole = np.where(np.isfinite(whole), whole, 0.0)  # NaN and infinities: 0 (any value is ok)
    info = np.iinfo(target.numpy)
    # Saturate out of range (implementation-defined): compare as floats, 2^k exactly.
    below, above = whole < float(info.min), whole >= 2.0 ** (info.bits - (info.min < 0))
    inside = np.where(below | above, 0.0, whole).astype(target.numpy)
    return np.where(below, info.min, np.where(above, info.max, inside)).astype(target.numpy)


def _operands(env: _Environment, op: BoundOp, compute: DType) -> list[np.ndarray]:
    return [_convert(env.get(name), env.dtype(name), compute) for name in op.inputs]


# ---- operations -------------------------------------------------------------------------------


def _run(env: _Environment, op: BoundOp) -> np.ndarray:
    dims = env.dims(op.output)
    match op.kind:
        case OpKind.CONTRACTION:
            assert op.contraction is not None
            return _contraction(env, op, op.contraction, dims)
        case OpKind.SPECIAL:
            return _special(env, op, dims)
        case _:
            result = _elementwise(env, op)
            return np.array(np.broadcast_to(result, dims))


def _elementwise(env: _Environment, op: BoundOp) -> np.ndarray:
    output = env.dtype(op.output)
    compute = op.compute or output
    fn = op.fn
    if fn == "cast":
        (name,) = op.inputs
        return _convert(env.get(name), env.dtype(name), output)
    if fn == "cond":
        condition = env.get(op.inputs[0]) != 0
        then, other = (_convert(env.get(n), env.dtype(n), output) for n in op.inputs[1:])
        return np.where(condition, then, other)
    args = _operands(env, op, compute)
    if fn.startswith("cmp_"):
        return _COMPARE[fn](*args)
    if fn == "ident":
        return _convert(args[0], compute, output)
    if compute.is_float:
        return _float(fn, args)
    return _integer(fn, args, compute).astype(output.numpy)


_COMPARE = {
    "cmp_eq": np.equal,
    "cmp_ne": np.not_equal,
    "cmp_lt": np.less,
    "cmp_gt": np.greater,
    "cmp_le": np.less_equal,
    "cmp_ge": np.greater_equal,
}

_FLOAT_MATH = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "recip": np.reciprocal,
    "floor": np.floor,
    "ceil": np.ceil,
    "pow": np.power,
}


def _float(fn: str, args: list[np.ndarray]) -> np.ndarray:
    if fn == "round":  # halves away from zero (spec 9.3)
        (x,) = args
        whole = np.trunc(x)
        return whole + np.sign(x) * (np.abs(x - whole) >= 0.5)
    if fn not in _FLOAT_MATH:
        raise ReferenceUnsupported(f"the reference evaluator has no float '{fn}'")
    return np.asarray(_FLOAT_MATH[fn](*args), np.float64)


def _integer(fn: str, args: list[np.ndarray], dtype: DType) -> np.ndarray:
    """Integer (or bool) `fn` on operands of `dtype`, wrapping in it (spec 7.4)."""
    match fn:
        case "add":
            return np.add(*args)
        case "sub":
            return np.subtract(*args)
        case "mul":
            return np.multiply(*args)
        case "div":
            return _divide(*args)
        case "neg":
            return np.negative(args[0])
        case "bit_and":
            return np.bitwise_and(*args)
        case "bit_or":
            return np.bitwise_or(*args)
        case "bit_xor":
            return np.bitwise_xor(*args)
        case "bit_not":
            return np.invert(args[0])
        case "bit_left" | "bit_right":
            x, count = args
            shift = np.bitwise_and(count, dtype.bits - 1).astype(x.dtype)  # modulo the width
            return np.left_shift(x, shift) if fn == "bit_left" else np.right_shift(x, shift)
    raise ReferenceUnsupported(f"the reference evaluator has no integer '{fn}'")


def _divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Truncating division; x / 0 == 0 and MIN / -1 == MIN (spec 7.4)."""
    x, y = np.broadcast_arrays(x, y)
    zero = y == 0
    divisor = np.where(zero, 1, y).astype(y.dtype)
    exact = x - np.fmod(x, divisor)  # a multiple of the divisor: floor division is exact
    return np.where(zero, 0, np.floor_divide(exact, divisor)).astype(x.dtype)


# ---- special operations -----------------------------------------------------------------------


def _special(env: _Environment, op: BoundOp, dims: tuple[int, ...]) -> np.ndarray:
    values = [env.get(name) for name in op.inputs]
    match op.fn:
        case "reshape":
            return values[0].reshape(dims)
        case "index":
            return np.indices(dims, dtype=np.int32)[op.params[0]]
        case "shape":
            return np.array(env.dims(op.inputs[0]), np.int32)
        case "gather":
            table, index = values
            return np.take(table, np.clip(index, 0, table.shape[0] - 1), axis=0)
        case "scatter":
            source, index, _ = values
            result = np.zeros(dims, source.dtype)
            np.add.at(result, np.clip(index, 0, dims[0] - 1), source)
            return result
        case "prng_value" | "prng_state":
            draws, state = _prng(values[0], math.prod(op.params[1:]))
            return draws.reshape(dims) if op.fn == "prng_value" else state
    raise ReferenceUnsupported(f"the reference evaluator has no special '{op.fn}'")


def _prng(state: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` values in [0, 1] and the new state, by the lane algorithm of spec 9.6."""
    a, b, d = (row.astype(np.uint32) for row in state)
    lanes = a.size
    draws = np.zeros(count, np.float64)
    for start in range(0, count, lanes):
        active = min(lanes, count - start)
        x, y, z = a[:active], b[:active], d[:active]
        x = ((x & 0xFFFFFFFE) << 12) ^ (((x << 13) ^ x) >> 19)
        y = ((y & 0xFFFFFFF8) << 4) ^ (((y << 2) ^ y) >> 25)
        z = ((z & 0xFFFFFFF0) << 17) ^ (((z << 3) ^ z) >> 11)
        a[:active], b[:active], d[:active] = x, y, z
        rounded = (x ^ y ^ z).astype(np.float32)  # first rounded to f32, then scaled
        draws[start : start + active] = rounded / np.float32(4294967296.0)
    return draws, np.stack([a, b, d])


# ---- contractions -----------------------------------------------------------------------------


def valid_tuples(
    bound: BoundProgram, op: BoundOp, chunk: int | None = None
) -> Iterator[tuple[np.ndarray, tuple[np.ndarray, ...]]]:
    """The valid index tuples of contraction `op` (spec 8.4), `chunk` (default CHUNK) tuples
    of its box at a time: the row-major offset of each valid tuple's output element and of
    each operand element it reads."""
    space = _Space.of(bound, op)
    if space is None:  # binding reports an empty or unbounded contraction before this
        return
    chunk = chunk or CHUNK
    for start in range(0, space.total, chunk):
        flat = np.arange(start, min(space.total, start + chunk), dtype=np.int64)
        axes = np.unravel_index(flat, space.sizes) if space.sizes else ()
        point = {
            name: axis + low for name, axis, low in zip(space.names, axes, space.lows, strict=True)
        }
        valid = np.ones(flat.size, bool)
        for poly, size in space.checks:
            valid &= _in_range(poly, size, point, flat.size)[1]
        offsets = []
        for access in space.accesses:
            offset = np.zeros(flat.size, np.int64)
            strides = _row_major([size for _, size in access])
            for (poly, size), stride in zip(access, strides, strict=True):
                index, inside = _in_range(poly, size, point, flat.size)
                valid &= inside
                offset += index * stride
            offsets.append(offset)
        yield offsets[0][valid], tuple(o[valid] for o in offsets[1:])


def work(bound: BoundProgram) -> int:
    """About how many index tuples and elements `evaluate` visits: the size of every
    contraction's box plus every value's element count (a million take well under a second)."""
    env = _Environment(bound)
    total = 0
    for op in bound.ops:
        total += math.prod(env.dims(op.output))
        space = _Space.of(bound, op) if op.contraction is not None else None
        total += space.total if space is not None else 0
    return total


@dataclass(frozen=True, slots=True)
class _Space:
    """The index space of one contraction: each access (output first) and user constraint
    as (polynomial, range) pairs, and the box of `tile.bind.bounds` holding every valid tuple."""

    names: tuple[str, ...]
    accesses: list[list[tuple[Polynomial, int]]]
    checks: list[tuple[Polynomial, int]]
    lows: list[int]
    sizes: list[int]

    @property
    def total(self) -> int:
        return math.prod(self.sizes)

    @staticmethod
    def of(bound: BoundProgram, op: BoundOp) -> _Space | None:
        contraction = op.contraction
        assert contraction is not None
        env = _Environment(bound)
        tensors = [op.output, *(a.tensor for a in contraction.operands)]
        accesses = [
            list(zip(access.polys, env.dims(tensor), strict=True))
            for access, tensor in zip(contraction.access, tensors, strict=True)
        ]
        checks = [(c.poly, c.range) for c in contraction.constraints]
        pairs = [pair for access in accesses for pair in access] + checks
        ranges = [RangeConstraint(poly, size) for poly, size in pairs if not poly.is_constant]
        names = contraction.index_names
        box = index_bounds(ranges, names).bounds
        if box is None:
            return None
        lows, sizes = [box[n].lo for n in names], [box[n].size for n in names]
        return _Space(names, accesses, checks, lows, sizes)


def _row_major(dims: Sequence[int]) -> list[int]:
    strides = [1] * len(dims)
    for axis in range(len(dims) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * dims[axis + 1]
    return strides


def _in_range(
    poly: Polynomial, size: int, point: Mapping[str, np.ndarray], count: int
) -> tuple[np.ndarray, np.ndarray]:
    """The value of `poly` at each of the `count` tuples of `point` (where it is an integer)
    and whether it is an integer in [0, size). Exact: scaled to integer coefficients."""
    scale = poly.denominator()
    numerator = np.full(count, int(poly.const * scale), np.int64)
    for name, coefficient in poly.terms:
        numerator += int(coefficient * scale) * point[name]
    value, remainder = np.divmod(numerator, scale)
    return value, (remainder == 0) & (value >= 0) & (value < size)


_IDENTITY = {AggOp.SUM: 0, AggOp.PROD: 1, AggOp.ASSIGN: 0}
_AGGREGATE = {AggOp.SUM: np.add, AggOp.PROD: np.multiply, AggOp.MAX: np.maximum}


def _contraction(
    env: _Environment, op: BoundOp, contraction: BoundContraction, dims: tuple[int, ...]
) -> np.ndarray:
    output = env.dtype(op.output)
    names = [a.tensor for a in contraction.operands]
    operands = [(env.get(n).reshape(-1), env.dtype(n)) for n in names]
    result = _initial(contraction.agg, output, math.prod(dims))
    written = np.zeros(result.size, bool)
    for out, offsets in valid_tuples(env.bound, op):
        read = [values[o] for (values, _), o in zip(operands, offsets, strict=True)]
        combined = _combine(contraction.comb, read, [d for _, d in operands], output)
        written[out] = True
        match contraction.agg:
            case AggOp.ASSIGN:
                result[out] = combined  # collisions are the program's error (spec 8.7)
            case AggOp.MIN:
                np.minimum.at(result, out, combined)
            case agg:
                _AGGREGATE[agg].at(result, out, combined)
    if contraction.default is not None:
        default = _convert(env.get(contraction.default), env.dtype(contraction.default), output)
        unwritten = default.reshape(-1)
    else:
        unwritten = np.zeros(1, result.dtype)
    return np.where(written, result, unwritten).astype(result.dtype).reshape(dims)


def _initial(agg: AggOp, dtype: DType, size: int) -> np.ndarray:
    """The accumulator before any tuple: the identity of `agg` (never seen in the output)."""
    representation = np.float64 if dtype.is_float else dtype.numpy
    if agg in _IDENTITY:
        return np.full(size, _IDENTITY[agg], representation)
    if dtype.is_float:
        return np.full(size, -np.inf if agg is AggOp.MAX else np.inf)
    if dtype.is_bool:
        return np.full(size, agg is AggOp.MIN)
    info = np.iinfo(dtype.numpy)
    return np.full(size, info.min if agg is AggOp.MAX else info.max, representation)


def _combine(
    comb: CombOp, values: list[np.ndarray], dtypes: list[DType], output: DType
) -> np.ndarray:
    """The combined value of each tuple (spec 8.5), of the output's type."""
    match comb:
        case CombOp.NONE:
            return values[0]
        case CombOp.ADD | CombOp.MUL:
            x, y = (_convert(v, d, output) for v, d in zip(values, dtypes, strict=True))
            if output.is_float:
                return x + y if comb is CombOp.ADD else x * y
            return _integer("add" if comb is CombOp.ADD else "mul", [x, y], output)
    common = _promote(dtypes[0], dtypes[1])
    x, y = (_convert(v, d, common) for v, d in zip(values[:2], dtypes[:2], strict=True))
    if comb is CombOp.EQ:
        return x == y
    chosen = _convert(values[2], dtypes[2], output)
    return np.where(x == y, chosen, np.zeros(1, chosen.dtype))

"""Builtin functions in LLVM IR: the math library of the LLVM renderer.

Place in the pipeline: `render_expr.py` converts a `Call`'s arguments to the call's type
(design 4.4) and asks `emit_builtin` for the result. Lowering (design 7.2):

- rounding, `sqrt`, `abs`, `min`/`max`, `pow`, `log`, the trigonometric and hyperbolic
  functions are LLVM intrinsics; LLVM turns them into instructions where the CPU has them
  and into calls to the C library (`tanf`, `powf`, ...) elsewhere, lane by lane for
  vectors, which MCJIT resolves from the process;
- `exp`, `log` and `tanh` of float32 are written here in IR from polynomials, for scalars
  and vectors alike: a libm call per lane keeps elementwise kernels scalar and 6x slower
  than torch (PERFORMANCE.md 3); all stay within 1.5 ulp (numpy's own float32 `exp` and
  `log` reach 2.4 and 3.8);
- `MAD` is `llvm.fmuladd`, which becomes a fused multiply-add where the CPU has one;
- float16 arguments are computed in float32 and rounded back (spec 9.3: as accurate as a
  C math library, which has no half functions); integers use `llvm.abs`/`smax`/... .
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from hal_llvm.render_types import (
    FLOAT,
    I32,
    element_of,
    intrinsic_suffix,
    is_signed,
    lanes_of,
    splat_constant,
)
from semtree.nodes import Builtin, UnsupportedNode
from semtree.types import DType

if TYPE_CHECKING:
    from collections.abc import Sequence

    from semtree.types import Type

# Flags of the instructions inside the math helpers: `contract` only, whatever the kernel's
# fast-math setting, because `nnan`/`ninf` would break their NaN and overflow handling.
_HELPER_FLAGS = ("contract",)


class Declarations:
    """Functions a module calls (intrinsics, helpers), declared once each."""

    def __init__(self, module: ir.Module) -> None:
        self.module = module

    def function(
        self, name: str, return_type: ir.Type, argument_types: Sequence[ir.Type]
    ) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        function = ir.Function(self.module, ir.FunctionType(return_type, argument_types), name)
        function.attributes.add("nounwind")
        return function

    def overloaded(self, name: str, type_: ir.Type, arguments: int = 1) -> ir.Function:
        """`llvm.<name>.<type>` taking `arguments` operands of `type_` and returning one."""
        return self.function(f"{name}.{intrinsic_suffix(type_)}", type_, [type_] * arguments)


def emit_builtin(
    builder: ir.IRBuilder,
    declarations: Declarations,
    fn: Builtin,
    arguments: Sequence[ir.Value],
    type_: Type,
    flags: tuple[str, ...],
) -> ir.Value:
    """`fn(*arguments)` where every argument already has the call's type `type_`.

    `flags` are the fast-math flags of the kernel's float instructions.
    """
    if not type_.is_float:
        return _integer_builtin(builder, declarations, fn, arguments, type_)
    if type_.dtype is DType.FLOAT16:
        # Native half values: compute in float32 (exact for everything but the functions
        # that round anyway) and round the result back once.
        single = ir.VectorType(FLOAT, type_.vec_width) if type_.vec_width > 1 else FLOAT
        wide = [builder.fpext(argument, single) for argument in arguments]
        result = _float_builtin(builder, declarations, fn, wide, DType.FLOAT32, flags)
        return builder.fptrunc(result, arguments[0].type)
    assert type_.dtype is not None
    return _float_builtin(builder, declarations, fn, list(arguments), type_.dtype, flags)


_INTRINSICS = {
    Builtin.ACOS: "llvm.acos",
    Builtin.ASIN: "llvm.asin",
    Builtin.ATAN: "llvm.atan",
    Builtin.CEIL: "llvm.ceil",
    Builtin.COS: "llvm.cos",
    Builtin.COSH: "llvm.cosh",
    Builtin.EXP: "llvm.exp",
    Builtin.FLOOR: "llvm.floor",
    Builtin.LOG: "llvm.log",
    Builtin.ROUND: "llvm.round",  # halves away from zero, as spec 9.3 asks
    Builtin.SIN: "llvm.sin",
    Builtin.SINH: "llvm.sinh",
    Builtin.SQRT: "llvm.sqrt",
    Builtin.TAN: "llvm.tan",
    Builtin.TANH: "llvm.tanh",
    Builtin.ABS: "llvm.fabs",
    Builtin.MAX: "llvm.maxnum",  # C fmax: a NaN operand is ignored (design 4.2)
    Builtin.MIN: "llvm.minnum",
    Builtin.POW: "llvm.pow",
}


def _float_builtin(
    builder: ir.IRBuilder,
    declarations: Declarations,
    fn: Builtin,
    arguments: list[ir.Value],
    dtype: DType,
    flags: tuple[str, ...],
) -> ir.Value:
    type_ = arguments[0].type
    match fn:
        case Builtin.EXP if dtype is DType.FLOAT32:
            return builder.call(exp_function(declarations, type_), arguments)
        case Builtin.TANH if dtype is DType.FLOAT32:
            return builder.call(tanh_function(declarations, type_), arguments)
        case Builtin.LOG if dtype is DType.FLOAT32:
            return builder.call(log_function(declarations, type_), arguments)
        case Builtin.RECIP:
            return builder.fdiv(splat_constant(type_, 1.0), arguments[0], flags=flags)
        case Builtin.MAD if "contract" in flags or "fast" in flags:
            function = declarations.overloaded("llvm.fmuladd", type_, 3)
            return builder.call(function, arguments, fastmath=flags)
        case Builtin.MAD:
            # MAD may be fused; a setting that disables fusion gets two roundings.
            product = builder.fmul(arguments[0], arguments[1], flags=flags)
            return builder.fadd(product, arguments[2], flags=flags)
        case _ if fn in _INTRINSICS:
            function = declarations.overloaded(_INTRINSICS[fn], type_, fn.arity)
            return builder.call(function, arguments, fastmath=flags)
        case _:
            raise UnsupportedNode(fn)


def _integer_builtin(
    builder: ir.IRBuilder,
    declarations: Declarations,
    fn: Builtin,
    arguments: Sequence[ir.Value],
    type_: Type,
) -> ir.Value:
    value = arguments[0]
    signed = is_signed(type_)
    match fn:
        case Builtin.ABS if signed:
            # `false`: abs(MIN) is MIN (wraps), as numpy and C's two's complement give.
            function = declarations.function(
                f"llvm.abs.{intrinsic_suffix(value.type)}",
                value.type,
                [value.type, ir.IntType(1)],
            )
            return builder.call(function, [value, ir.Constant(ir.IntType(1), 0)])
        case Builtin.ABS:
            return value
        case Builtin.MAX | Builtin.MIN:
            name = ("s" if signed else "u") + ("max" if fn is Builtin.MAX else "min")
            function = declarations.overloaded(f"llvm.{name}", value.type, 2)
            return builder.call(function, list(arguments))
        case Builtin.MAD:
            return builder.add(builder.mul(value, arguments[1]), arguments[2])
        case _:
            raise UnsupportedNode(fn, f"{fn.value} of {type_}")


# ---- float32 exp and tanh in IR ------------------------------------------------------------

# exp(x) = 2^k * exp(r), k = rint(x / ln 2), r = x - k ln 2 (Cody-Waite: LN2_HIGH has 9
# significant bits, so k * LN2_HIGH is exact for every k that occurs), and
# exp(r) = 1 + r + r^2 * P(r) on |r| <= ln2/2. P's coefficients were fitted to
# (e^r - 1 - r) / r^2 by iteratively reweighted least squares on Chebyshev points (relative
# error weighting), then rounded to float32; the whole function is within 1.05 ulp of the
# correctly rounded result on [-103, 88.7].
_LOG2_E = 1.4426950408889634
_LN2_HIGH = 0.693359375
_LN2_LOW = -2.12194440e-4
_EXP_POLYNOMIAL = (  # P(r) = c0 + c1 r + c2 r^2 + c3 r^3 + c4 r^4
    0.4999999701976776,
    0.16666579246520996,
    0.04166780039668083,
    0.008362862281501293,
    0.001382197835482657,
)
# Beyond these bounds the result is already 0 or infinity; clamping keeps k within the
# range where 2^k can be built from two normal powers of two.
_EXP_HIGH = 89.0
_EXP_LOW = -104.0

# log(x) = k ln 2 + log(1 + f) with x = 2^k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)) (found by
# subtracting the bit pattern of sqrt(1/2), so the exponent field rounds to the nearer power
# of two), and log(1 + f) = f - f^2/2 + f^3 R(f); R was fitted like P, to
# (log1p(f) - f + f^2/2) / f^3. Subnormal arguments are scaled by 2^23 first. Within 1.5 ulp
# on the whole range.
_LOG_POLYNOMIAL = (
    0.3333333134651184,
    -0.250008225440979,
    0.20001225173473358,
    -0.16623352468013763,
    0.14201785624027252,
    -0.13160260021686554,
    0.1276140958070755,
    -0.07634082436561584,
)
_SQRT_HALF_BITS = 0x3F3504F3
_SMALLEST_NORMAL = 1.1754943508222875e-38
_MANTISSA_MASK = 0x7FFFFF

# tanh(x) = x + x^3 * Q(x^2) for |x| < 0.625 (Q fitted like P, to (tanh(x) - x) / x^3), and
# sign(x) * (1 - 2 / (exp(2|x|) + 1)) above, where that form has no cancellation left.
# Within 1.3 ulp everywhere (numpy's float32 tanh: 1.37).
_TANH_SMALL = 0.625
_TANH_POLYNOMIAL = (
    -0.3333328068256378,
    0.13331441581249237,
    -0.053739696741104126,
    0.02063903585076332,
    -0.00570493470877409,
)


def _helper(
    declarations: Declarations, name: str, type_: ir.Type
) -> tuple[ir.Function, ir.IRBuilder | None]:
    """The internal always-inline helper `name.<type>`; a builder if it still needs a body."""
    symbol = f"{name}.{intrinsic_suffix(type_)}"
    existing = declarations.module.globals.get(symbol)
    if existing is not None:
        return existing, None
    function = declarations.function(symbol, type_, [type_])
    function.linkage = "internal"
    function.attributes.add("alwaysinline")
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def _polynomial(
    builder: ir.IRBuilder,
    declarations: Declarations,
    variable: ir.Value,
    coefficients: Sequence[float],
) -> ir.Value:
    """Horner's scheme with multiply-adds, highest coefficient first."""
    type_ = variable.type
    fmuladd = declarations.overloaded("llvm.fmuladd", type_, 3)
    result: ir.Value = splat_constant(type_, coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = builder.call(fmuladd, [result, variable, splat_constant(type_, coefficient)])
    return result


def _power_of_two(builder: ir.IRBuilder, exponent: ir.Value, type_: ir.Type) -> ir.Value:
    """2^exponent as float32 lanes, for exponents of normal numbers (-126..127)."""
    lanes = lanes_of(type_)
    integer = ir.VectorType(I32, lanes) if lanes > 1 else I32
    biased = builder.add(exponent, splat_constant(integer, 127))
    return builder.bitcast(builder.shl(biased, splat_constant(integer, 23)), type_)


def exp_function(declarations: Declarations, type_: ir.Type) -> ir.Function:
    """`float exp(float)` (scalar or vector) in IR; NaN, +-inf and subnormal results exact."""
    function, builder = _helper(declarations, "tile.exp", type_)
    if builder is None:
        return function
    assert element_of(type_) == FLOAT
    (value,) = function.args
    lanes = lanes_of(type_)
    integer = ir.VectorType(I32, lanes) if lanes > 1 else I32
    # Clamp with compares, not minnum/maxnum, so that a NaN passes through.
    too_high = builder.fcmp_ordered(">", value, splat_constant(type_, _EXP_HIGH))
    clamped = builder.select(too_high, splat_constant(type_, _EXP_HIGH), value)
    too_low = builder.fcmp_ordered("<", clamped, splat_constant(type_, _EXP_LOW))
    clamped = builder.select(too_low, splat_constant(type_, _EXP_LOW), clamped)
    # k from a NaN-free copy (NaN -> 0), so that converting it is defined; the NaN still
    # reaches the result through `clamped`.
    ordered = builder.fcmp_ordered("ord", clamped, clamped)
    finite = builder.select(ordered, clamped, splat_constant(type_, 0.0))
    scaled = builder.fmul(finite, splat_constant(type_, _LOG2_E), flags=_HELPER_FLAGS)
    whole = builder.call(declarations.overloaded("llvm.rint", type_), [scaled])
    fmuladd = declarations.overloaded("llvm.fmuladd", type_, 3)
    reduced = builder.call(fmuladd, [whole, splat_constant(type_, -_LN2_HIGH), clamped])
    reduced = builder.call(fmuladd, [whole, splat_constant(type_, -_LN2_LOW), reduced])
    polynomial = _polynomial(builder, declarations, reduced, _EXP_POLYNOMIAL)
    square = builder.fmul(reduced, reduced, flags=_HELPER_FLAGS)
    mantissa = builder.call(fmuladd, [polynomial, square, reduced])
    mantissa = builder.fadd(mantissa, splat_constant(type_, 1.0), flags=_HELPER_FLAGS)
    exponent = builder.fptosi(whole, integer)  # within [-151, 129]: defined, vectorises
    # 2^k in two halves: each is a normal number for k in [-150, 128], and the product
    # rounds once, correctly, into the subnormal range or to infinity.
    first = builder.ashr(exponent, splat_constant(integer, 1))
    second = builder.sub(exponent, first)
    result = builder.fmul(mantissa, _power_of_two(builder, first, type_), flags=_HELPER_FLAGS)
    result = builder.fmul(result, _power_of_two(builder, second, type_), flags=_HELPER_FLAGS)
    builder.ret(result)
    return function


def log_function(declarations: Declarations, type_: ir.Type) -> ir.Function:
    """`float log(float)` (scalar or vector) in IR; 0, negatives, infinity, NaN and
    subnormal arguments as C's `logf`."""
    function, builder = _helper(declarations, "tile.log", type_)
    if builder is None:
        return function
    (value,) = function.args
    lanes = lanes_of(type_)
    integer = ir.VectorType(I32, lanes) if lanes > 1 else I32
    subnormal = builder.fcmp_ordered("<", value, splat_constant(type_, _SMALLEST_NORMAL))
    scaled = builder.fmul(value, splat_constant(type_, 2.0**23), flags=_HELPER_FLAGS)
    scaled = builder.select(subnormal, scaled, value)
    bias = builder.select(subnormal, splat_constant(integer, -23), splat_constant(integer, 0))
    bits = builder.sub(builder.bitcast(scaled, integer), splat_constant(integer, _SQRT_HALF_BITS))
    exponent = builder.add(builder.ashr(bits, splat_constant(integer, 23)), bias)
    mantissa = builder.and_(bits, splat_constant(integer, _MANTISSA_MASK))
    mantissa = builder.add(mantissa, splat_constant(integer, _SQRT_HALF_BITS))
    # Exact (Sterbenz): the mantissa lies within a factor of two of 1.
    fraction = builder.fsub(builder.bitcast(mantissa, type_), splat_constant(type_, 1.0))
    polynomial = _polynomial(builder, declarations, fraction, _LOG_POLYNOMIAL)
    square = builder.fmul(fraction, fraction, flags=_HELPER_FLAGS)
    cube = builder.fmul(square, fraction, flags=_HELPER_FLAGS)
    half_square = builder.fmul(square, splat_constant(type_, -0.5), flags=_HELPER_FLAGS)
    fmuladd = declarations.overloaded("llvm.fmuladd", type_, 3)
    tail = builder.call(fmuladd, [polynomial, cube, half_square])
    whole = builder.sitofp(exponent, type_)
    high = builder.call(fmuladd, [whole, splat_constant(type_, _LN2_HIGH), fraction])
    low = builder.call(fmuladd, [whole, splat_constant(type_, _LN2_LOW), tail])
    result = builder.fadd(high, low, flags=_HELPER_FLAGS)
    specials = (
        (builder.fcmp_ordered("==", value, splat_constant(type_, 0.0)), -math.inf),
        (builder.fcmp_ordered("<", value, splat_constant(type_, 0.0)), math.nan),
        (builder.fcmp_ordered("==", value, splat_constant(type_, math.inf)), math.inf),
    )
    for condition, special in specials:
        result = builder.select(condition, splat_constant(type_, special), result)
    builder.ret(builder.select(builder.fcmp_unordered("uno", value, value), value, result))
    return function


def tanh_function(declarations: Declarations, type_: ir.Type) -> ir.Function:
    """`float tanh(float)` (scalar or vector) in IR, branch-free."""
    function, builder = _helper(declarations, "tile.tanh", type_)
    if builder is None:
        return function
    (value,) = function.args
    magnitude = builder.call(declarations.overloaded("llvm.fabs", type_), [value])
    square = builder.fmul(value, value, flags=_HELPER_FLAGS)
    polynomial = _polynomial(builder, declarations, square, _TANH_POLYNOMIAL)
    cube_factor = builder.fmul(polynomial, square, flags=_HELPER_FLAGS)
    fmuladd = declarations.overloaded("llvm.fmuladd", type_, 3)
    small = builder.call(fmuladd, [cube_factor, value, value])
    doubled = builder.fadd(magnitude, magnitude, flags=_HELPER_FLAGS)
    exponential = builder.call(exp_function(declarations, type_), [doubled])
    denominator = builder.fadd(exponential, splat_constant(type_, 1.0), flags=_HELPER_FLAGS)
    fraction = builder.fdiv(splat_constant(type_, 2.0), denominator, flags=_HELPER_FLAGS)
    large = builder.fsub(splat_constant(type_, 1.0), fraction, flags=_HELPER_FLAGS)
    copysign = declarations.overloaded("llvm.copysign", type_, 2)
    large = builder.call(copysign, [large, value])
    is_small = builder.fcmp_ordered("<", magnitude, splat_constant(type_, _TANH_SMALL))
    builder.ret(builder.select(is_small, small, large))
    return function

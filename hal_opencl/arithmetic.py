"""OpenCL C arithmetic with the semtree's semantics (design 4.4 rules 8 and 9).

Place in the pipeline: `render.py` converts both operands of an operation to their common type
(`spelling.convert`) and asks this module to spell the operation itself. OpenCL C alone would
not give the results the reference interpreter defines, so:

- signed integer `+ - *`, unary `-` and `<<` go through the unsigned type of the same width
  and back with `as_<type>` (signed overflow is undefined behaviour in C; unsigned wraps);
- scalars narrower than `int` are promoted by C, so their results are cast back;
- integer `/` and `%` call a guarded helper (`x / 0 == 0`, `MIN / -1 == MIN`, `x % 0 == 0`)
  unless the divisor is a literal that cannot trap;
- shift counts are taken modulo the bit width of the operand type (spec 7.4);
- INDEX arithmetic is plain `int`: INDEX values stay in [0, 2^31) by construction (rule 10).

Helper functions are collected in a `Helpers` and emitted once per program, before the kernels.
"""

from __future__ import annotations

from hal_opencl.spelling import (
    ADD,
    ATOM,
    BIT_AND,
    BIT_OR,
    BIT_XOR,
    C_NAMES,
    EQUALITY,
    INDEX,
    LOGIC_AND,
    LOGIC_OR,
    MULTIPLY,
    RELATION,
    SHIFT,
    UNARY,
    UNSIGNED,
    Helpers,
    Text,
    broadcast,
    element_dtype,
    is_narrow,
    literal,
    mask_lanes_of,
    register_name,
    vector_name,
)
from semtree.nodes import BinOp, UnOp, UnsupportedNode
from semtree.types import DType, Type

PRECEDENCE = {
    BinOp.MUL: MULTIPLY,
    BinOp.DIV: MULTIPLY,
    BinOp.MOD: MULTIPLY,
    BinOp.ADD: ADD,
    BinOp.SUB: ADD,
    BinOp.SHL: SHIFT,
    BinOp.SHR: SHIFT,
    BinOp.LT: RELATION,
    BinOp.LE: RELATION,
    BinOp.GT: RELATION,
    BinOp.GE: RELATION,
    BinOp.EQ: EQUALITY,
    BinOp.NE: EQUALITY,
    BinOp.AND: BIT_AND,
    BinOp.XOR: BIT_XOR,
    BinOp.OR: BIT_OR,
    BinOp.LAND: LOGIC_AND,
    BinOp.LOR: LOGIC_OR,
}
_BITWISE_LEVELS = frozenset({SHIFT, BIT_AND, BIT_XOR, BIT_OR})
_MIN_MACROS = {
    DType.INT8: "CHAR_MIN",
    DType.INT16: "SHRT_MIN",
    DType.INT32: "INT_MIN",
    DType.INT64: "LONG_MIN",
}


# ---- spelling operations --------------------------------------------------------------------


def operand_code(text: Text, parent: int, right: bool) -> str:
    """An operand of a binary operator of precedence `parent`: parenthesised by C precedence,
    and also around bitwise operations, `&&` inside `||` and comparisons inside comparisons,
    so no reader needs those rules."""
    wrap = text.precedence < parent + (1 if right else 0)
    if text.precedence < UNARY and text.precedence != parent:
        wrap |= text.precedence in _BITWISE_LEVELS or parent in _BITWISE_LEVELS
        wrap |= parent == LOGIC_OR and text.precedence == LOGIC_AND
    comparisons = (RELATION, EQUALITY)
    wrap |= text.precedence in comparisons and parent in comparisons
    return f"({text.code})" if wrap else text.code


def infix(op: str, precedence: int, left: Text, right: Text, type_: Type) -> Text:
    code = f"{operand_code(left, precedence, False)} {op} {operand_code(right, precedence, True)}"
    return Text(code, precedence, type_)


def call(name: str, arguments: list[Text], type_: Type, lanes: DType | None = None) -> Text:
    return Text(f"{name}({', '.join(text.code for text in arguments)})", ATOM, type_, lanes)


def shuffle(first: Text, second: Text, mask: tuple[int, ...]) -> Text:
    """`shuffle2`, whose mask has unsigned lanes of the size of the vectors' elements."""
    lanes = vector_name(UNSIGNED[mask_lanes_of(first.type)], len(mask))
    picks = Text(f"({lanes})({', '.join(map(str, mask))})", ATOM, INDEX)
    return call("shuffle2", [first, second, picks], first.type.with_width(len(mask)))


def _plain(op: BinOp, left: Text, right: Text, type_: Type) -> Text:
    return _back_to(infix(op.value, PRECEDENCE[op], left, right, type_), type_)


def _back_to(text: Text, type_: Type) -> Text:
    """C promotes narrow scalars to `int`: cast the result back to their type."""
    if is_narrow(type_):
        return Text(f"({register_name(type_)})({text.code})", UNARY, type_)
    return text


def _wraps_natively(type_: Type) -> bool:
    """Unsigned types of at least 32 bits (and unsigned vectors) wrap without help."""
    dtype = element_dtype(type_)
    return not dtype.is_signed and not is_narrow(type_)


def _unsigned(text: Text, type_: Type) -> Text:
    """A value of the integer type `type_` as the unsigned type whose arithmetic wraps like it
    (`uint` for scalars up to 32 bits, `ulong` for 64, `as_uintN` of the same lanes)."""
    dtype = element_dtype(type_)
    if text.unsigned is not None and text.type == type_:
        # `+ - * <<` and negation are the same modulo 2^n for every n, so the untruncated
        # unsigned form of an earlier result serves as well as the result itself.
        return text.unsigned
    if type_.is_vector:
        unsigned = UNSIGNED.get(dtype, dtype)
        if text.constant is not None:
            scalar = literal(int(text.constant) % 2 ** (8 * dtype.itemsize), Type.value(unsigned))
            return broadcast(scalar, type_.vec_width)
        full = broadcast(text, type_.vec_width)
        if unsigned is dtype:
            return full
        name = vector_name(unsigned, type_.vec_width)
        return Text(f"as_{name}({full.code})", ATOM, Type.value(unsigned, type_.vec_width))
    wide = DType.UINT64 if dtype.itemsize == 8 else DType.UINT32
    if text.constant is not None:
        return literal(int(text.constant) % 2 ** (8 * wide.itemsize), Type.value(wide))
    return Text(f"({C_NAMES[wide]}){text.at(UNARY)}", UNARY, Type.value(wide))


def _from_unsigned(result: Text, type_: Type) -> Text:
    """An `_unsigned` computation's result back in the signed or narrow type `type_`."""
    if _wraps_natively(type_):
        return Text(result.code, result.precedence, type_)
    if is_narrow(type_):
        return Text(f"({register_name(type_)})({result.code})", UNARY, type_, unsigned=result)
    return Text(f"as_{register_name(type_)}({result.code})", ATOM, type_, unsigned=result)


def _wrapping(op: BinOp, left: Text, right: Text, type_: Type) -> Text:
    if _wraps_natively(type_):
        return infix(op.value, PRECEDENCE[op], left, right, type_)
    unsigned_left, unsigned_right = _unsigned(left, type_), _unsigned(right, type_)
    result = infix(op.value, PRECEDENCE[op], unsigned_left, unsigned_right, unsigned_left.type)
    return _from_unsigned(result, type_)


def shift_count(count: Text, type_: Type) -> Text:
    """The shift count taken modulo the bit width of `type_` (spec 7.4)."""
    bits = 32 if type_.is_index else 8 * element_dtype(type_).itemsize
    if count.constant is not None:
        return literal(int(count.constant) % bits, type_)
    return infix("&", BIT_AND, count, literal(bits - 1, type_), count.type)


def _shift_left(left: Text, count: Text, type_: Type) -> Text:
    if _wraps_natively(type_) or type_.is_index:
        return infix("<<", SHIFT, left, count, type_)
    unsigned_left = _unsigned(left, type_)
    unsigned_count = _unsigned(count, type_) if type_.is_vector else count
    if type_.is_vector and count.constant is not None:
        unsigned_count = literal(count.constant, unsigned_left.type)
    result = infix("<<", SHIFT, unsigned_left, unsigned_count, unsigned_left.type)
    return _from_unsigned(result, type_)


def _cannot_trap(divisor: Text, type_: Type) -> bool:
    """A literal divisor that is neither 0 nor (for signed types) -1."""
    if divisor.constant is None or divisor.constant == 0:
        return False
    return divisor.constant != -1 or not element_dtype(type_).is_signed or type_.is_index


def integer_arithmetic(op: BinOp, left: Text, right: Text, type_: Type, helpers: Helpers) -> Text:
    """`left op right` for an integer or INDEX `type_` (operands already of that type; a scalar
    operand of a vector operation has the vector's element type)."""
    match op:
        case BinOp.ADD | BinOp.SUB | BinOp.MUL:
            if type_.is_index:
                return infix(op.value, PRECEDENCE[op], left, right, type_)
            return _wrapping(op, left, right, type_)
        case BinOp.DIV | BinOp.MOD:
            if _cannot_trap(right, type_):
                return _plain(op, left, right, type_)
            name = division_helper(op, type_, helpers)
            width = type_.vec_width
            return call(name, [broadcast(left, width), broadcast(right, width)], type_)
        case BinOp.SHL | BinOp.SHR:
            # OpenCL C shifts a vector by a scalar, not a scalar by a vector: widen the left.
            left = broadcast(left, type_.vec_width)
            if op is BinOp.SHL:
                return _shift_left(left, shift_count(right, type_), type_)
            return _plain(op, left, shift_count(right, type_), type_)
        case BinOp.AND | BinOp.OR | BinOp.XOR:
            return _plain(op, left, right, type_)
        case _:
            raise UnsupportedNode(op, f"{op.value} is not integer arithmetic")


def negate(operand: Text, type_: Type) -> Text:
    """Unary minus: IEEE for floats, wrapping for integers (`-MIN == MIN`)."""
    if type_.is_float or type_.is_index or _wraps_natively(type_):
        inner = operand.at(UNARY)
        return Text(f"-({inner})" if inner.startswith("-") else f"-{inner}", UNARY, type_)
    unsigned = _unsigned(operand, type_)
    result = Text(f"-{unsigned.at(UNARY)}", UNARY, unsigned.type)
    return _from_unsigned(result, type_)


def complement(operand: Text, type_: Type) -> Text:
    """Bitwise not."""
    return _back_to(Text(f"~{operand.at(UNARY)}", UNARY, type_), type_)


def unary(op: UnOp, operand: Text, type_: Type) -> Text:
    match op:
        case UnOp.NEG:
            return negate(operand, type_)
        case UnOp.BIT_NOT:
            return complement(operand, type_)
        case _:
            raise UnsupportedNode(op, "logical not is spelled by the renderer")


# ---- helper functions -----------------------------------------------------------------------


def min_max(larger: bool, arguments: list[Text], type_: Type, helpers: Helpers) -> Text:
    """`max(a, b)` (`larger`) or `min(a, b)` through a small helper of this program: as C's
    `fmax`/`fmin` for floats (a NaN operand is ignored), plain comparison for integers. Not
    the OpenCL builtins: PoCL 3.0 calls its library's `max`, `fmax`, `mad` ... out of line,
    a call per lane group in the innermost loop, while a program's own functions are
    inlined."""
    name = register_name(type_)
    helper = f"tile_{'max' if larger else 'min'}_{name}"
    order = ">" if larger else "<"
    test = f"((a {order} b) | (b != b))" if type_.is_float else f"a {order} b"
    ignored = ", a NaN operand ignored" if type_.is_float else ""
    source = "\n".join(
        [
            f"// {'max' if larger else 'min'}(a, b){ignored}",
            f"{name} {helper}({name} a, {name} b) {{",
            f"  return {test} ? a : b;",
            "}",
        ]
    )
    width = type_.vec_width
    return call(helpers.use(helper, source), [broadcast(text, width) for text in arguments], type_)


def division_helper(op: BinOp, type_: Type, helpers: Helpers) -> str:
    """The name of the guarded `/` or `%` helper for `type_`, registering its source."""
    name = register_name(type_)
    kind = "div" if op is BinOp.DIV else "mod"
    helper = f"tile_{kind}_{name}"
    dtype = element_dtype(type_)
    signed = dtype.is_signed
    minimum = _MIN_MACROS.get(dtype, "0")
    symbol = op.value
    if not type_.is_vector:
        if signed:
            overflow = f"(a == {minimum} && b == -1)"
            if op is BinOp.DIV:
                body = f"b == 0 ? ({name})0 : {overflow} ? a : ({name})(a / b)"
            else:
                body = f"(b == 0 || {overflow}) ? ({name})0 : ({name})(a % b)"
        else:
            body = f"b == 0 ? ({name})0 : ({name})(a {symbol} b)"
        lines = [f"  return {body};"]
    else:
        mask = vector_name(mask_lanes_of(type_), type_.vec_width)
        invalid = f"b == ({name})(0)"
        if signed:
            invalid = f"({invalid}) | ((a == ({name})({minimum})) & (b == ({name})(-1)))"
        safe = f"a {symbol} select(b, ({name})(1), invalid)"
        keep = f"b == ({name})(0)" if op is BinOp.DIV else "invalid"
        lines = [
            f"  {mask} invalid = {invalid};",
            f"  return select({safe}, ({name})(0), {keep});",
        ]
    what = "x / 0 == 0, MIN / -1 == MIN" if op is BinOp.DIV else "x % 0 == 0, MIN % -1 == 0"
    source = "\n".join(
        [
            f"// {symbol} without traps: {what}",
            f"{name} {helper}({name} a, {name} b) {{",
            *lines,
            "}",
        ]
    )
    return helpers.use(helper, source)


def round_to_half(value: Text, helpers: Helpers) -> Text:
    """A float (or double) value rounded to half precision and widened back to float: a cast
    to FLOAT16 on a device without native half (rule 7). A float goes through the program's
    own conversions (`half_store`, `half_load`); a double, and a float3 (there is no ushort6),
    through `vstore_half`/`vload_half`, which round a double once, where a float would round
    it twice."""
    width = value.type.vec_width
    source = register_name(value.type)
    if element_dtype(value.type) is DType.FLOAT32 and width != 3:  # width 3: no ushort6
        there, back = float_to_half(width, helpers), half_to_float(width, helpers)
        return call(back, [Text(f"{there}({value.code})", ATOM, value.type)], value.type)
    suffix = str(width) if width > 1 else ""
    result = vector_name(DType.FLOAT32, width)
    helper = f"tile_round_half_{source}"
    lines = [
        f"// {source} rounded to the nearest half (even on ties), as float",
        f"{result} {helper}({source} x) {{",
        f"  ushort{suffix} bits;",
        f"  vstore_half{suffix}(x, 0, (__private half*)&bits);",
        f"  return vload_half{suffix}(0, (__private const half*)&bits);",
        "}",
    ]
    helpers.use(helper, "\n".join(lines))
    return call(helper, [value], Type.value(DType.FLOAT32, width))


def half_load(base: str, offset: str, width: int, space: str, helpers: Helpers) -> str:
    """Elements [offset * width, (offset + 1) * width) of the half pointer `base` as float
    (width 1, 2, 4, 8 or 16), converted by helpers of the program from their bits, as
    `vload_half[N]` would: PoCL 3.0 calls `vload_half` out of line, 5x slower in a float16
    matmul. Only the element's alignment is assumed."""
    element = _half_bits(base, offset, width, f"const {space}".strip(), helpers)
    return f"{half_to_float(width, helpers)}({element})"


def half_store(value: str, base: str, offset: str, width: int, space: str, helpers: Helpers) -> str:
    """The statement storing float `value` (width 1, 2, 4, 8 or 16) as half at elements
    [offset * width, (offset + 1) * width) of the half pointer `base`, rounded to nearest
    even by a helper of the program, as `vstore_half[N]` would: PoCL 3.0 calls `vstore_half`
    out of line, one element at a time (storing a float16 result of 1000 x 1024 took 9.9 ms,
    2.3 ms so). Only the element's alignment is assumed."""
    element = _half_bits(base, offset, width, space, helpers)
    return f"{element} = {float_to_half(width, helpers)}({value});"


def _half_bits(base: str, offset: str, width: int, qualifiers: str, helpers: Helpers) -> str:
    """The lvalue of the `width` half bit patterns (ushort[N]) at elements [offset * width,
    (offset + 1) * width) of the half pointer `base`, through a pointer with `qualifiers`
    (address space, const) that assumes only the element's alignment."""
    prefix = f"{qualifiers} " if qualifiers else ""
    if width == 1:
        return f"(({prefix}ushort*)({base}))[{offset}]"
    unaligned = helpers.unaligned(vector_name(DType.UINT16, width), 2)
    start = f"({prefix}ushort*)({base}) + ({offset}) * {width}"
    return f"*({prefix}{unaligned}*)({start})"


def float_to_half(width: int, helpers: Helpers) -> str:
    """The helper converting `width` floats to half bit patterns, rounding to nearest even
    without branches: normal results rebias the exponent and add the rounding bias (half an
    ulp less one, plus the kept mantissa's last bit); results below 2^-14 come out of a float
    addition to 0.5, whose ulp (2^-24) is that of a half subnormal; from 65520 up the sum
    carries into the infinity pattern, and from 2^16 up the result is infinity, or a quiet NaN
    keeping the top of the payload."""
    floats, words = vector_name(DType.FLOAT32, width), vector_name(DType.UINT32, width)
    halves = vector_name(DType.UINT16, width)
    name = f"tile_float_to_half_{floats}"
    suffix = str(width) if width > 1 else ""
    if width == 1:  # PoCL 3.0 calls a scalar select() out of line: 10x slower than ?:
        big = "a > 0x7f800000u ? nan : 0x7c00u"
        pick = "a >= 0x47800000u ? big : a < 0x38800000u ? tiny : normal"
    else:
        big = f"select(({words})(0x7c00u), nan, a > 0x7f800000u)"
        pick = "select(select(normal, tiny, a < 0x38800000u), big, a >= 0x47800000u)"
    body = [
        f"  {words} u = as_{words}(x);",
        f"  {words} a = u & 0x7fffffffu;",
        f"  {words} normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;",
        f"  {words} tiny = as_{words}(as_{floats}(a) + 0.5f) - 0x3f000000u;",
        f"  {words} nan = 0x7e00u | ((a >> 13) & 0x3ffu);",
        f"  {words} big = {big};",
        f"  {words} r = {pick};",
        f"  return convert_{halves}(r | ((u >> 16) & 0x8000u));",
    ]
    source = "\n".join(
        [
            f"// float{suffix} to half bits, to nearest even, as vstore_half{suffix}",
            f"{halves} {name}({floats} x) {{",
            *body,
            "}",
        ]
    )
    return helpers.use(name, source)


def half_to_float(width: int, helpers: Helpers) -> str:
    """The helper converting `width` half bit patterns to float: the exponent and mantissa
    moved into place and scaled by 2^112 (which also normalises subnormals), infinities and
    NaNs kept, the sign put back."""
    floats, words = vector_name(DType.FLOAT32, width), vector_name(DType.UINT32, width)
    name = f"tile_half_to_{floats}"
    suffix = str(width) if width > 1 else ""
    if width == 1:
        widened = "h"
    else:  # zero-extended lanes: each half next to a zero half (little-endian), 8 at a time
        parts = []
        for first in range(0, width, 8):
            lanes = range(first, min(width, first + 8))
            pairs = ", ".join(f"h.s{lane:x}, (ushort)0" for lane in lanes)
            parts.append(
                f"as_{vector_name(DType.UINT32, len(lanes))}((ushort{2 * len(lanes)})({pairs}))"
            )
        widened = parts[0] if len(parts) == 1 else f"({words})({', '.join(parts)})"
    body = [
        f"  {words} u = {widened};",
        f"  {words} em = (u & 0x7fffu) << 13;",
        f"  {words} special = em | 0x7f800000u;",
        f"  {words} finite = as_{words}(as_{floats}(em) * 0x1p112f);",
        f"  {words} r = (u & 0x7c00u) == 0x7c00u ? special : finite;",
        f"  return as_{floats}(r | ((u & 0x8000u) << 16));",
    ]
    source = "\n".join(
        [
            f"// half bits to float{suffix}, as vload_half{suffix}",
            f"{floats} {name}({vector_name(DType.UINT16, width)} h) {{",
            *body,
            "}",
        ]
    )
    return helpers.use(name, source)


def counted_lanes(
    at: str,
    count: str,
    dtype: DType,
    width: int,
    space: str,
    helpers: Helpers,
    value: str | None = None,
    fill: str | None = None,
) -> str:
    """A load (`value` None) of lanes [0, count) of the `width` elements of `dtype` at pointer
    `at` in address space `space`, `fill` (0 without) in the others, or the statement storing
    those lanes of `value`; through a helper of the program that touches no other element."""
    scalar, vector = vector_name(dtype), vector_name(dtype, width)
    unaligned = helpers.unaligned(vector, dtype.itemsize)
    prefix = f"{space} " if space else ""
    name = f"tile_lanes_{'load' if value is None else 'store'}{width}_"
    name += f"{space.strip('_') or 'private'}_{scalar}"
    if value is None:
        others, padding, parameter, argument = "0", f"({scalar})0", "", ""
        if fill is not None:  # a reduction's identity in the lanes past the edge
            name, others, padding, parameter = f"{name}_or", "fill", "fill", f", {scalar} fill"
            argument = f", {fill}"
        lines = [
            f"// lanes [0, n) of the {width} elements at p, {others} in the others, read alone",
            f"{vector} {name}(const {prefix}{scalar}* p, int n{parameter}) {{",
            f"  if (n >= {width}) return *(const {prefix}{unaligned}*)p;",
            f"  {scalar} lanes[{width}];",
            f"  for (int i = 0; i < {width}; i++) lanes[i] = i < n ? p[i] : {padding};",
            f"  return *({unaligned}*)lanes;",
            "}",
        ]
        helpers.use(name, "\n".join(lines))
        return f"{name}({at}, {count}{argument})"
    lines = [
        "// lanes [0, n) of x stored at p; the other elements untouched",
        f"void {name}({prefix}{scalar}* p, int n, {vector} x) {{",
        f"  if (n >= {width}) {{",
        f"    *({prefix}{unaligned}*)p = x;",
        "    return;",
        "  }",
        f"  {scalar} lanes[{width}];",
        f"  *({unaligned}*)lanes = x;",
        f"  for (int i = 0; i < {width} && i < n; i++) p[i] = lanes[i];",
        "}",
    ]
    helpers.use(name, "\n".join(lines))
    return f"{name}({at}, {count}, {value});"

"""Random Tile programs, one family per construct and kernel-generation path.

`draw(seed, index)` is a pure function of its arguments: the same pair gives the same source
and the same inputs on every machine, which makes `(seed, index)` a complete reproducer.
Each family writes Tile source directly and draws inputs that keep the reference exact
where the devices must be: no NaN or infinity, no ties for maxima and minima (values are
permutations of a spread range), products near 1, comparisons and conversions only on
input values (never on rounded intermediates, where float32 and float64 may disagree).

Sizes come from `SIZES`, which puts lane and tile edges first: 1, primes, 2^k ± 1 and
multiples of 8 and 16 ± 1 up to a few hundred; tensors stay small enough that a case runs
in milliseconds, except the `split` family, whose reductions are large enough to be split
into a partials kernel and a total kernel.

Families and the paths they aim at (tile.lower.generate):
- `reduce`: every aggregation over random axes of rank 1-3 tensors, every dtype (generic
  kernels, lane reductions when the innermost reduction is contiguous and a multiple of 8);
- `matmul`: `+(A * B)` with transposed layouts, batches and fused epilogues (register-tiled
  vector kernels, fused elementwise epilogues);
- `conv`: 1-D and 2-D convolutions with strides, dilations and padding (guarded vector
  kernels);
- `elementwise`: chains of random expressions over broadcast inputs (fused elementwise);
- `masked`: `==` and `== ?` combinations with every aggregation;
- `structural`: constraints, windows, padding, reversal, strided and fractional outputs,
  `default`, transposes with `=`;
- `chain`: softmax, layer norm and argmax as multi-statement programs (contractions feeding
  elementwise ops feeding contractions);
- `special`: reshape, index, gather, scatter;
- `split`: large reductions to a few elements (split reductions on CPU devices).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

# Sizes at lane and tile edges; the first ones are drawn more often.
SIZES = (
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    9,
    11,
    13,
    15,
    16,
    17,
    24,
    31,
    32,
    33,
    40,
    47,
    48,
    63,
    64,
    65,
    72,
    97,
    127,
    128,
    129,
    136,
    191,
    255,
    256,
    257,
)
FLOATS = ("float32", "float32", "float32", "float64", "float16")
TYPES = {
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "i8": "int8",
    "i32": "int32",
    "u8": "uint8",
    "bool": "bool",
}


@dataclass(frozen=True)
class Case:
    """One program and its inputs; `seed` and `index` reproduce it."""

    family: str
    source: str
    inputs: dict[str, np.ndarray] = field(repr=False)
    seed: int = 0
    index: int = 0

    @property
    def reproducer(self) -> str:
        return f"--seed {self.seed} --case {self.index}"


class Draw:
    """A random source with the helpers every family uses."""

    def __init__(self, seed: int, index: int) -> None:
        self.random = random.Random(f"{seed}:{index}")
        self.numpy = np.random.default_rng([seed, index])

    def size(self, limit: int = 257) -> int:
        choices = [s for s in SIZES if s <= limit] or [1]
        # Early sizes more often: weight 1 / sqrt(position + 1).
        weights = [1 / math.sqrt(i + 1) for i in range(len(choices))]
        return self.random.choices(choices, weights)[0]

    def sizes(self, rank: int, budget: int) -> list[int]:
        """`rank` sizes whose product stays under `budget`."""
        result = []
        for _ in range(rank):
            left = max(1, budget // max(1, math.prod(result)))
            result.append(self.size(min(257, left)))
        self.random.shuffle(result)
        return result

    def pick(self, items: tuple | list):
        return self.random.choice(items)

    def chance(self, p: float) -> bool:
        return self.random.random() < p

    def values(
        self, shape: tuple[int, ...] | list[int], dtype: str, kind: str = "spread"
    ) -> np.ndarray:
        """Inputs of `dtype`: `spread` floats are distinct values in [-2, 2] (no ties),
        `unit` floats lie in [0.8, 1.25] (for products), `keys` are small integers."""
        shape = tuple(shape)
        count = math.prod(shape)
        rng = self.numpy
        if dtype == "bool":
            return rng.random(shape) < 0.5
        if dtype.startswith(("int", "uint")):
            info = np.iinfo(dtype)
            if kind == "keys":
                return rng.integers(0, 4, shape).astype(dtype)
            if kind == "unit":
                return rng.integers(-3, 4, shape).astype(dtype)
            low, high = max(info.min, -60), min(info.max, 60)
            if dtype == "uint8":
                low, high = 0, 255
            return rng.integers(low, high + 1, shape).astype(dtype)
        if kind == "unit":
            return (0.8 + 0.45 * rng.random(shape)).astype(dtype)
        if kind == "keys":
            return rng.integers(0, 4, shape).astype(dtype)
        ranks = rng.permutation(count).reshape(shape).astype(np.float64)
        spread = (ranks - (count - 1) / 2) / max(1.0, count / 4)  # within [-2, 2], distinct
        jitter = rng.random(shape) * 0.25 / max(1.0, count / 4)
        if kind == "positive":  # sums without cancellation: a relative tolerance applies
            spread = spread + 2.5
        return (spread + jitter).astype(dtype)


def tile_type(dtype: str) -> str:
    return {v: k for k, v in TYPES.items()}[dtype]


# ---- families --------------------------------------------------------------------------------

VARS = "ijklmn"


def reduce_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    rank = d.pick((1, 2, 2, 3))
    dtype = d.pick((*FLOATS, "int32", "uint8", "bool"))
    agg = d.pick(("+", ">", "<", "*") if dtype != "bool" else (">", "<"))
    budget = 300 if agg == "*" and dtype.startswith("float") else 40000
    shape = d.sizes(rank, budget)
    if d.chance(0.4):  # a contiguous innermost reduction that runs in lanes
        shape[-1] = d.pick((16, 24, 32, 40, 48, 64, 72, 128, 136, 256, 264))
        if math.prod(shape) > budget:
            shape = [1] * (rank - 1) + [shape[-1]]
    names = VARS[:rank]
    kept = [v for v in names if d.chance(0.5)]
    d.random.shuffle(kept)
    dims = ", ".join(f"D{a}" for a in range(rank))
    out_sizes = ", ".join(f"D{names.index(v)}" for v in kept)
    kind = {"*": "unit", "+": "positive"}.get(agg, "spread")
    inputs = {"X": d.values(shape, dtype, kind)}
    operand = f"X[{', '.join(names)}]"
    if dtype.startswith("float") and d.chance(0.3) and agg != "*":
        # A second operand broadcast along the first axis: +(X[i, j] * Y[j]) and friends.
        comb = d.pick(("*", "+"))
        inputs["Y"] = d.values(shape[1:] or [1], dtype)
        y_index = ", ".join(names[1:]) if rank > 1 else "0"
        operand = f"{operand} {comb} Y[{y_index}]"
        header = f"X[{dims}], Y[{', '.join(f'E{a}' for a in range(max(1, rank - 1)))}]"
    else:
        header = f"X[{dims}]"
    source = (
        f"function ({header}) -> (O) {{\n"
        f"  O[{', '.join(kept)}: {out_sizes}] = {agg}({operand});\n}}"
    )
    return source, inputs


def matmul_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    dtype = d.pick(("float32", "float32", "float32", "float64", "float16", "int32"))
    m, k, n = d.size(129), d.size(129), d.size(129)
    batch = d.size(5) if d.chance(0.25) else 0
    a_t, b_t = d.chance(0.3), d.chance(0.3)
    a_shape = [k, m] if a_t else [m, k]
    b_shape = [n, k] if b_t else [k, n]
    a_index = "k, m" if a_t else "m, k"
    b_index = "n, k" if b_t else "k, n"
    if batch:
        a_shape, b_shape = [batch, *a_shape], [batch, *b_shape]
        a_index, b_index = f"b, {a_index}", f"b, {b_index}"
    a_dims = ", ".join(f"A{x}" for x in range(len(a_shape)))
    b_dims = ", ".join(f"B{x}" for x in range(len(b_shape)))
    out = f"b, m, n: {batch}, {m}, {n}" if batch else f"m, n: {m}, {n}"
    kind = "unit" if dtype == "int32" else "spread"
    inputs = {"A": d.values(a_shape, dtype, kind), "B": d.values(b_shape, dtype, kind)}
    lines = [f"C[{out}] = +(A[{a_index}] * B[{b_index}]);"]
    outputs = ["C"]
    header = [f"A[{a_dims}]", f"B[{b_dims}]"]
    if d.chance(0.6):
        inputs["Bias"] = d.values([n], dtype)
        header.append("Bias[N]")
        lines.append(f"D = {epilogue(d, 'C', dtype)};")
        outputs = ["D", "C"] if d.chance(0.3) else ["D"]
    source = f"function ({', '.join(header)}) -> ({', '.join(outputs)}) {{\n  "
    return source + "\n  ".join(lines) + "\n}", inputs


def epilogue(d: Draw, name: str, dtype: str) -> str:
    """An elementwise function of `name` and `Bias` (a fused epilogue)."""
    if dtype.startswith("int"):
        return d.pick((f"{name} + Bias", f"max({name}, 0) * 2", f"{name} < 0 ? Bias : {name}"))
    return d.pick(
        (
            f"relu({name} + Bias)",
            f"{name} * 0.5 + Bias",
            f"tanh({name}) + Bias",
            f"max({name}, Bias)",
            f"sigmoid({name} - Bias)",
            f"{name} + Bias * {name}",
        )
    )


def conv_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    dtype = d.pick(("float32", "float32", "float32", "float64", "float16"))
    spatial = d.pick((1, 2))
    n, ci, co = d.size(3), d.size(17), d.size(33)
    kernel = [d.pick((1, 2, 3, 3, 5)) for _ in range(spatial)]
    stride = d.pick((1, 1, 2))
    dilation = d.pick((1, 1, 2))
    same = d.chance(0.5)
    extents, pads, outs = [], [], []
    for kx in kernel:
        reach = dilation * (kx - 1) + 1
        size = max(reach, d.size(33 if spatial == 2 else 129))
        pad = (reach - 1) // 2 if same else 0
        out = (size + 2 * pad - reach) // stride + 1
        extents.append(size)
        pads.append(pad)
        outs.append(out)
    xs, ks = "xyz"[:spatial], ["kx", "ky", "kz"][:spatial]
    terms = []
    for x, kv, pad in zip(xs, ks, pads, strict=True):
        term = (
            f"{stride} * {x} + {dilation} * {kv}" if stride > 1 or dilation > 1 else f"{x} + {kv}"
        )
        terms.append(f"{term} - {pad}" if pad else term)
    window, taps = ", ".join(terms), ", ".join(ks)
    spaces, sizes = [f"X{a}" for a in range(spatial)], [f"K{a}" for a in range(spatial)]
    channels_first = d.chance(0.4)  # PyTorch's NCHW x OIHW (tile.lower.relayout)
    if d.chance(0.25):  # depthwise: one filter per channel (tile.lower.channels)
        co = ci
        if channels_first:
            i_dims, f_dims = ", ".join(["N", "C", *spaces]), ", ".join(["FC", *sizes])
            out_index, out_sizes = ", ".join(["n", "c", *xs]), [n, ci, *outs]
            access = f"I[n, c, {window}] * F[c, {taps}]"
            image, kernel_shape = [n, ci, *extents], [ci, *kernel]
        else:
            i_dims, f_dims = ", ".join(["N", *spaces, "C"]), ", ".join([*sizes, "FC"])
            out_index, out_sizes = ", ".join(["n", *xs, "c"]), [n, *outs, ci]
            access = f"I[n, {window}, c] * F[{taps}, c]"
            image, kernel_shape = [n, *extents, ci], [*kernel, ci]
    elif channels_first:
        i_dims, f_dims = ", ".join(["N", "CI", *spaces]), ", ".join(["CO", "FI", *sizes])
        out_index, out_sizes = ", ".join(["n", "co", *xs]), [n, co, *outs]
        access = f"I[n, ci, {window}] * F[co, ci, {taps}]"
        image, kernel_shape = [n, ci, *extents], [co, ci, *kernel]
    else:
        i_dims, f_dims = ", ".join(["N", *spaces, "CI"]), ", ".join([*sizes, "FI", "CO"])
        out_index, out_sizes = ", ".join(["n", *xs, "co"]), [n, *outs, co]
        access = f"I[n, {window}, ci] * F[{taps}, ci, co]"
        image, kernel_shape = [n, *extents, ci], [*kernel, ci, co]
    bias = [co] + [1] * spatial if channels_first else [co]
    out_sizes = ", ".join(str(size) for size in out_sizes)
    inputs = {"I": d.values(image, dtype), "F": d.values(kernel_shape, dtype)}
    lines = [f"O[{out_index}: {out_sizes}] = +({access});"]
    outputs = "O"
    header = f"I[{i_dims}], F[{f_dims}]"
    if d.chance(0.4):
        inputs["Bias"] = d.values(bias, dtype)
        header += f", Bias[{', '.join(f'B{a}' for a in range(len(bias)))}]"
        lines.append(f"R = {epilogue(d, 'O', dtype)};")
        outputs = "R"
    return f"function ({header}) -> ({outputs}) {{\n  " + "\n  ".join(lines) + "\n}", inputs


# Elementwise expressions: (template, arity); `{0}`... are subexpressions.
FLOAT_UNARY = (
    "-{0}",
    "abs({0})",
    "relu({0})",
    "tanh({0})",
    "sigmoid({0})",
    "sin({0})",
    "cos({0})",
    "sqrt(abs({0}) + 0.25)",
    "log(abs({0}) + 0.5)",
    "exp({0} * 0.25)",
    "({0} * {0})",
    "{0} * 1.5",
    "0.5 - {0}",
    "atan({0})",
    "neg({0})",
    "ident({0})",
)
FLOAT_BINARY = (
    "{0} + {1}",
    "{0} - {1}",
    "{0} * {1}",
    "{0} / (abs({1}) + 1)",
    "max({0}, {1})",
    "min({0}, {1})",
    "pow(abs({0}) + 0.5, {1} * 0.5)",
    "add({0}, {1})",
)
INT_UNARY = (
    "-{0}",
    "abs({0})",
    "{0} * 3",
    "{0} + 7",
    "~{0}",
    "{0} >> 1",
    "{0} << 2",
    "max({0}, 0)",
)
INT_BINARY = (
    "{0} + {1}",
    "{0} - {1}",
    "{0} * {1}",
    "{0} / {1}",
    "max({0}, {1})",
    "min({0}, {1})",
    "{0} & {1}",
    "{0} | {1}",
    "{0} ^ {1}",
    "{0} >> ({1} & 7)",
    "{0} << {1}",
    "{0} >> {1}",
    "({0} < {1} ? {0} : {1} * 2)",
    "({0} == {1} ? {1} : 5)",
)


def elementwise_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    integer = d.chance(0.3)
    base_rank = d.pick((1, 2, 2, 3))
    base = d.sizes(base_rank, 20000)
    count = d.pick((1, 2, 3))
    inputs: dict[str, np.ndarray] = {}
    header = []
    leaves: list[str] = []
    for position in range(count):
        name = "ABC"[position]
        # A broadcast operand: drop leading dimensions, or set some to 1.
        shape = list(base[d.random.randrange(base_rank) if d.chance(0.4) else 0 :])
        shape = [1 if d.chance(0.2) else s for s in shape] or [1]
        if integer:
            dtype = d.pick(
                ("int32", "int32", "uint8", "int8", "int16", "uint16", "int64", "uint32", "uint64")
            )
        else:
            dtype = d.pick(("float32", "float32", "float64", "float16", "int32"))
        # Integers among floats stay small: a float32 sin or cos of a large argument is
        # ill-conditioned (its argument's rounding alone moves the result).
        small = not integer and dtype == "int32"
        inputs[name] = d.values(shape, dtype, "unit" if small else "spread")
        header.append(f"{name}[{', '.join(f'{name}{a}' for a in range(len(shape)))}]")
        leaves.append(name)
    # Float expressions read integer inputs converted (float-only builtins reject integers).
    terms = [
        f"as_float({name}, 32)" if not integer and inputs[name].dtype.kind == "i" else name
        for name in leaves
    ]
    unary, binary = (INT_UNARY, INT_BINARY) if integer else (FLOAT_UNARY, FLOAT_BINARY)

    def expression(depth: int, names: list[str]) -> str:
        if depth == 0 or d.chance(0.25):
            return d.pick(names)
        if not integer and d.chance(0.1) and len(leaves) >= 2:
            # A comparison of inputs (exact in every type) choosing between subexpressions.
            first, second = d.random.sample(leaves, 2)
            op = d.pick(("<", ">", "==", "!=", "<=", ">="))
            then, other = expression(depth - 1, names), expression(depth - 1, names)
            return f"({first} {op} {second} ? {then} : {other})"
        if d.chance(0.5):
            return "(" + d.pick(unary).format(expression(depth - 1, names)) + ")"
        left, right = expression(depth - 1, names), expression(depth - 1, names)
        return "(" + d.pick(binary).format(left, right) + ")"

    lines, names = [], terms
    statements = d.pick((1, 1, 2, 3))
    for position in range(statements):
        target = f"T{position}"
        lines.append(f"{target} = {expression(d.pick((1, 2, 3)), names)};")
        names.append(target)
    if integer and d.chance(0.3):
        lines.append(f"T{statements} = as_float(T{statements - 1}, 32) * 0.5;")
        statements += 1
    outputs = [f"T{statements - 1}"]
    if statements > 1 and d.chance(0.3):
        outputs.append("T0")
    source = f"function ({', '.join(header)}) -> ({', '.join(outputs)}) {{\n  "
    return source + "\n  ".join(lines) + "\n}", inputs


def masked_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    n, m = d.size(129), d.size(129)
    key = d.pick(("int32", "int32", "float32", "uint8"))
    dtype = d.pick(("float32", "float32", "float64", "int32", "float16"))
    inputs = {"A": d.values([n], key, "keys"), "B": d.values([m], key, "keys")}
    if d.chance(0.25):
        agg = d.pick((">", "<"))
        source = f"function (A[N], B[M]) -> (O) {{\n  O[i: N] = {agg}(A[i] == B[j]);\n}}"
        return source, inputs
    agg = d.pick(("+", ">", "<"))
    if d.chance(0.3):
        k = d.size(33)
        inputs["V"] = d.values([m, k], dtype)
        body = f"O[i, k: N, {k}] = {agg}(A[i] == B[j] ? V[j, k]);"
        header = "A[N], B[M], V[M2, K]"
    else:
        inputs["V"] = d.values([m], dtype)
        body = f"O[i: N] = {agg}(A[i] == B[j] ? V[j]);"
        header = "A[N], B[M], V[M2]"
    return f"function ({header}) -> (O) {{\n  {body}\n}}", inputs


def structural_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    dtype = d.pick((*FLOATS, "int32"))
    n = d.size(129)
    agg = d.pick(("+", ">", "<"))
    x = {"X": d.values([n], dtype, "positive" if agg == "+" else "spread")}
    templates: list[Callable[[], tuple[str, dict[str, np.ndarray]]]] = [
        lambda: (f"O[i: N] = {agg}(X[k]), i - k < N;", x),
        lambda: (f"O[i: (N + 1) / 2] = {agg}(X[2 * i + j]), j < 2;", x),
        lambda: ("O[i: N + 2] = =(X[i - 1]);", x),
        lambda: ("O[N - 1 - i: N] = =(X[i]);", x),
        lambda: (f"O[2 * i: 2 * N] = {agg}(X[i]);", x),
        lambda: ("O[i: 2 * N] = +(X[i / 2]);", x),
        lambda: (f"O[i / 2: (N + 1) / 2] = {agg}(X[i]);", x),
        lambda: (f"O[i: N] = {agg}(X[i]), i < {max(1, n // 2)};", x),
        lambda: (f"O[i: N + 3] = {agg}(X[i]) default D;", {**x, "D": d.values([n + 3], dtype)}),
        lambda: (
            (f"O[i, j: N, N] = {agg}(X[i]), j - i < N;", x)
            if n <= 65
            else (f"O[i: N] = {agg}(X[i]);", x)
        ),
        lambda: ("O[3 * i + k: 3 * N] = =(X[i]), k < 3;", x),
    ]
    if d.chance(0.35):
        rows, columns = d.size(65), d.size(65)
        y = {"Y": d.values([rows, columns], dtype)}
        templates = [
            lambda: ("O[j, i: C, R] = =(Y[i, j]);", y),
            lambda: (f"O[i, j: R + 2, C + 2] = {agg}(Y[i - 1, j - 1]);", y),
            lambda: (
                f"O[y, x: (R + 1) / 2, (C + 1) / 2] = {agg}(Y[2 * y + ky, 2 * x + kx]), "
                "ky < 2, kx < 2;",
                y,
            ),
            lambda: (f"O[y, x: R, C] = {agg}(Y[y + ky - 1, x + kx - 1]), ky < 3, kx < 3;", y),
            lambda: (f"O[i: R] = {agg}(Y[i, j]), j - i < C;", y),
            lambda: ("O[i, i: R, R] = =(Y[i, 0]);", y),
        ]
    body, inputs = d.pick(templates)()
    headers = {"X": "X[N]", "D": "D[ND]", "Y": "Y[R, C]"}
    header = ", ".join(headers[name] for name in inputs)
    return f"function ({header}) -> (O) {{\n  {body}\n}}", inputs


def chain_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    dtype = d.pick(("float32", "float32", "float64", "float16"))
    rows, columns = d.size(65), d.size(257)
    x = d.values([rows, columns], dtype)
    which = d.pick(("softmax", "builtin", "layernorm", "argmax", "logsumexp"))
    if which == "softmax":
        body = """M[i, 0: R, 1] = >(X[i, j]);
  E = exp(X - M);
  S[i, 0: R, 1] = +(E[i, j]);
  Y = E / S;"""
        return f"function (X[R, C]) -> (Y) {{\n  {body}\n}}", {"X": x}
    if which == "builtin":
        fn = d.pick(("builtin_softmax", "builtin_logsoftmax"))
        return f"function (X[R, C]) -> (Y) {{\n  Y = {fn}(X, {rows}, {columns});\n}}", {"X": x}
    if which == "layernorm":
        body = f"""S[i, 0: R, 1] = +(X[i, j]);
  Mean = S / {columns};
  D = X - Mean;
  Q[i, 0: R, 1] = +(D[i, j] * D[i, j]);
  Y = D / sqrt(Q / {columns} + 0.001);"""
        return f"function (X[R, C]) -> (Y) {{\n  {body}\n}}", {"X": x}
    if which == "logsumexp":
        body = """M[i: R] = >(X[i, j]);
  Mx[i, 0: R, 1] = =(M[i]);
  E = exp(X - Mx);
  S[i: R] = +(E[i, j]);
  Y = log(S) + M;"""
        return f"function (X[R, C]) -> (Y) {{\n  {body}\n}}", {"X": x}
    agg = d.pick((">", "<"))
    body = f"""Mx[r: R] = {agg}(X[r, c]);
  AM[r: R] = >(X[r, c] == Mx[r] ? I[c]);"""
    inputs = {"X": x, "I": np.arange(columns, dtype=np.int32)}
    if dtype == "float16":
        inputs["X"] = d.values([rows, columns], "float32")  # distinct in float32
    return f"function (X[R, C], I[C2]) -> (AM) {{\n  {body}\n}}", inputs


def special_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    dtype = d.pick((*FLOATS, "int32"))
    which = d.pick(("reshape", "index", "gather", "scatter", "prng", "simple_reduce", "shape"))
    if which == "prng":
        state = d.numpy.integers(128, 2**32, [3, 2048], dtype=np.uint64).astype(np.uint32)
        shape = d.sizes(d.pick((1, 2)), 5000)
        sizes = ", ".join(str(s) for s in shape)
        body = f"""R = prng_step(S, {sizes});
  V = prng_value(R);
  N = prng_state(R);"""
        return f"function (S[A, B]) -> (V, N) {{\n  {body}\n}}", {"S": state}
    if which == "simple_reduce":
        a, b, c = d.size(9), d.size(17), d.size(33)
        x = d.values([a, b, c], dtype, "positive")
        target = d.pick(((1, c), (c,), (b, 1), (b, c), (1, 1)))
        sizes = ", ".join(str(s) for s in target)
        return f"function (X[A, B, C]) -> (O) {{\n  O = simple_reduce(X, {sizes});\n}}", {"X": x}
    if which == "shape":
        x = d.values(d.sizes(3, 4000), dtype)
        body = """Sh = shape(X);
  M = mod(X0 + 7, 3) + broadcast(X1, 1);
  O[i: 3] = +(Sh[i]);
  P = X * M;"""
        return f"function (X[X0, X1, X2]) -> (O, P) {{\n  {body}\n}}", {"X": x}
    if which == "reshape":
        a, b = d.size(33), d.size(33)
        x = d.values([a * b], dtype)
        body = f"""R = reshape(X, {a}, {b});
  O[j: {b}] = +(R[i, j]);"""
        return f"function (X[N]) -> (O) {{\n  {body}\n}}", {"X": x}
    if which == "index":
        shape = d.sizes(2, 4000)
        x = d.values(shape, dtype)
        axis = d.pick((0, 1))
        return (
            f"function (X[A, B]) -> (O) {{\n  O = X * index(X, {axis}) + index(X, 1 - {axis});\n}}",
            {"X": x},
        )
    rows, width = d.size(33), d.size(33)
    count = d.size(65)
    v = d.values([rows, width], dtype)
    index = d.numpy.integers(-2, rows + 2, [count]).astype(np.int32)  # clamped out of range
    if which == "gather":
        return "function (V[R, W], I[N]) -> (O) {\n  O = gather(V, I);\n}", {"V": v, "I": index}
    e = d.values([count, width], dtype)
    source = "function (E[N, W], I[N2], V[R, W2]) -> (O) {\n  O = scatter(E, I, V);\n}"
    return source, {"E": e, "I": index, "V": v}


def split_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    agg = d.pick(("+", ">", "<"))
    dtype = d.pick(("float32", "float32", "float64"))
    outputs = d.pick((1, 1, 2, 3))
    k = d.pick((1 << 19, 3 << 17, (1 << 20) + 8 * d.size(257), 5 << 17)) // outputs
    k -= k % 8
    x = d.values([outputs, k], dtype, "unit" if agg == "+" else "spread")
    if outputs == 1 and d.chance(0.5):
        return f"function (X[N]) -> (O) {{\n  O[] = {agg}(X[i]);\n}}", {"X": x.reshape(-1)}
    return f"function (X[R, K]) -> (O) {{\n  O[r: R] = {agg}(X[r, k]);\n}}", {"X": x}


def dag_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    """A random program: elementwise ops, reductions that keep their axes, and products with
    square weights, each reading any earlier value that broadcasts (NNSmith-style), over
    inputs of mixed float types, a scalar input and a named constant."""
    rows, columns = d.size(65), d.size(129)
    shapes: dict[str, tuple[int, ...]] = {}
    inputs: dict[str, np.ndarray] = {}
    header: list[str] = []

    def add_input(name: str, shape: tuple[int, ...]) -> None:
        dtype = d.pick(("float32", "float32", "float64", "float16"))
        inputs[name] = d.values(shape, dtype)
        shapes[name] = shape
        header.append(f"{name}[{', '.join(f'{name}{a}' for a in range(len(shape)))}]")

    add_input("X", (rows, columns))
    if d.chance(0.5):
        add_input("Y", d.pick(((columns,), (rows, 1), (1, columns), (rows, columns))))
    lines: list[str] = []
    leaves: list[str] = []
    if d.chance(0.3):
        inputs["S"] = np.array(d.pick((0.5, -1.25, 3.0)), np.float32)
        header.append("S")
        leaves.append("S")
    if d.chance(0.3):
        lines.append(f"K = {d.pick(('2.5', '-0.75', '3', 'X1 / 4'))};")
        leaves.append("K")
    steps = d.pick((2, 3, 4, 5))
    for step in range(steps):
        name = f"T{step}"
        values = list(shapes)
        choice = d.pick(("ew", "ew", "reduce", "reduce", "matmul"))
        first = d.pick(values)
        shape = shapes[first]
        if choice == "matmul" and len(shape) == 2 and shape[1] <= 129:
            weight = f"W{step}"
            add_input(weight, (shape[1], shape[1]))
            lines.append(
                f"{name}[i, j: {shape[0]}, {shape[1]}] = +({first}[i, k] * {weight}[k, j]);"
            )
        elif choice == "reduce" and len(shape) >= 1:
            agg = d.pick(("+", ">", "<"))
            if len(shape) == 2 and d.chance(0.5):
                lines.append(f"{name}[i, 0: {shape[0]}, 1] = {agg}({first}[i, j]);")
                shape = (shape[0], 1)
            elif len(shape) == 2:
                lines.append(f"{name}[0, j: 1, {shape[1]}] = {agg}({first}[i, j]);")
                shape = (1, shape[1])
            else:
                lines.append(f"{name}[] = {agg}({first}[i]);")
                shape = ()
        else:
            second = d.pick(values)
            try:
                broadcast = tuple(np.broadcast_shapes(shape, shapes[second]))
            except ValueError:
                second, broadcast = first, shape
            operand = d.pick([second, *leaves]) if leaves and d.chance(0.3) else second
            if operand == second:
                shape = broadcast
            template = d.pick(FLOAT_BINARY)
            text = template.format(first, operand)
            if d.chance(0.5):
                text = d.pick(FLOAT_UNARY).format(f"({text})")
            lines.append(f"{name} = {text};")
        shapes[name] = shape
    outputs = [f"T{steps - 1}"]
    if steps > 2 and d.chance(0.4):
        outputs.append(f"T{d.random.randrange(steps - 1)}")
    source = f"function ({', '.join(header)}) -> ({', '.join(outputs)}) {{\n  "
    return source + "\n  ".join(lines) + "\n}", inputs


def typed_family(d: Draw) -> tuple[str, dict[str, np.ndarray]]:
    """Mixed element types: contractions of operands of different types (promotion, 8-bit
    wrap-around), conversions and boolean results, 0-D tensors and scalar inputs as
    contraction operands, transposed convolutions."""
    kinds = ("float32", "float16", "float64", "int32", "int8", "uint8")
    which = d.pick(("product", "convert", "scalar", "transposed"))
    n, m = d.size(65), d.size(65)
    if which == "product":
        first, second = d.pick(kinds), d.pick(kinds)
        a, b = d.values([n, m], first, "unit"), d.values([m], second, "unit")
        agg = d.pick(("+", ">", "<", "*"))
        if agg == "*":
            a, b = a[:, :4].copy(), b[:4].copy()
        source = f"function (A[N, M], B[M2]) -> (O) {{\n  O[i: N] = {agg}(A[i, j] * B[j]);\n}}"
        return source, {"A": a, "B": b}
    if which == "convert":
        source_type = d.pick(kinds)
        x = d.values([n, m], source_type, "spread" if source_type.startswith("float") else "x")
        y = d.values([m], source_type, "spread" if source_type.startswith("float") else "x")
        conversion = d.pick(
            (
                "as_int(X, 32)",
                "as_int(X, 8)",
                "as_uint(X, 8)",
                "as_float(X, 16)",
                "as_float(X, 64)",
                "as_bool(X)",
                "as_int(X, 16)",
            )
        )
        if source_type.startswith("float") and "as_float" not in conversion:
            # Exact integral floats in range of every target (out of range is
            # implementation-defined, spec 5.4).
            conversion = conversion.replace("X", "floor(abs(X) * 10)")
        body = f"""C = {conversion};
  B = X < Y;
  O = B ? C : 0;
  P = as_bool(X) == B;"""
        return f"function (X[N, M], Y[M2]) -> (O, B, P) {{\n  {body}\n}}", {"X": x, "Y": y}
    if which == "scalar":
        x = d.values([n], d.pick(kinds[:3]))
        s = np.array(d.pick((2, -3, 0.5)), np.float32 if d.chance(0.5) else np.int32)
        body = """Z[] = +(X[i]);
  O[i: N] = +(X[i] * S[]);
  P[i: N] = >(X[i] * Z[]);
  Q = O + Z;"""
        return f"function (X[N], S) -> (O, P, Q) {{\n  {body}\n}}", {"X": x, "S": s}
    k = d.pick((1, 2, 3, 4))
    stride = d.pick((1, 2, 3))
    x, f = d.values([n], "float32"), d.values([k], "float32")
    size = stride * (n - 1) + k
    source = (
        f"function (I[N], K[KX]) -> (O) {{\n  O[{stride} * x + k: {size}] = +(I[x] * K[k]);\n}}"
    )
    return source, {"I": x, "K": f}


FAMILIES: dict[str, Callable[[Draw], tuple[str, dict[str, np.ndarray]]]] = {
    "reduce": reduce_family,
    "matmul": matmul_family,
    "conv": conv_family,
    "elementwise": elementwise_family,
    "masked": masked_family,
    "structural": structural_family,
    "chain": chain_family,
    "special": special_family,
    "split": split_family,
    "dag": dag_family,
    "typed": typed_family,
}
# How often each family is drawn.
WEIGHTS = {
    "reduce": 4,
    "matmul": 3,
    "conv": 3,
    "elementwise": 4,
    "masked": 2,
    "structural": 3,
    "chain": 2,
    "special": 1,
    "split": 0.3,
    "dag": 4,
    "typed": 2,
}


def draw(seed: int, index: int, family: str | None = None) -> Case:
    """Case `index` of the stream `seed` (of `family` when given)."""
    d = Draw(seed, index)
    if family is None:
        names = list(WEIGHTS)
        family = d.random.choices(names, [WEIGHTS[n] for n in names])[0]
    source, inputs = FAMILIES[family](d)
    return Case(family, source, inputs, seed, index)

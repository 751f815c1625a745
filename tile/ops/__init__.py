"""`tile.ops`: an op library in NumPy / `torch.nn.functional` spelling whose ops build lazy
expressions that compile to **one** Tile function (docs/OPS.md).

    from tile import ops
    X = ops.input("X", ("N", 28, 28, 1))
    W = ops.input("W", (3, 3, 1, 8))
    Y = ops.relu(ops.conv(X, W, padding="same"))
    fn = ops.function(Y=Y)          # a tile.Function; print(fn.source)
    fn(X=x, W=w)["Y"]

Python operators (`+ - * / ** @`, comparisons, unary `-`) on values write elementwise ops and
matmul. Element types are those of the arrays bound when the function is called.
"""

from __future__ import annotations

from tile.ops.elementwise import (
    abs,
    add,
    cast,
    divide,
    equal,
    exp,
    gelu,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    power,
    relu,
    sigmoid,
    sqrt,
    subtract,
    tanh,
    where,
)
from tile.ops.graph import OpsError, Value, constant, function, input, matmul, source
from tile.ops.nn import (
    avg_pool,
    batch_norm,
    conv,
    conv_transpose,
    cross_entropy,
    layer_norm,
    log_softmax,
    max_pool,
    mse_loss,
    softmax,
)
from tile.ops.shapes import (
    argmax,
    argmin,
    broadcast_to,
    concatenate,
    gather,
    max,
    mean,
    min,
    pad,
    prod,
    reshape,
    sum,
    transpose,
)
from tile.ops.tensors import install as _install

_install()  # tile.Tensor's arithmetic operators (tile.ops.tensors)

__all__ = [
    "OpsError", "Value", "abs", "add", "argmax", "argmin", "avg_pool", "batch_norm",
    "broadcast_to", "cast", "concatenate", "constant", "conv", "conv_transpose",
    "cross_entropy", "divide", "equal", "exp", "function", "gather", "gelu", "greater",
    "greater_equal", "input", "layer_norm", "less", "less_equal", "log", "log_softmax",
    "matmul", "max", "max_pool", "maximum", "mean", "min", "minimum", "mse_loss", "multiply",
    "negative", "not_equal", "pad", "power", "prod", "relu", "reshape", "sigmoid", "softmax",
    "source", "sqrt", "subtract", "sum", "tanh", "transpose", "where",
]  # fmt: skip

"""Neural-network ops, channels-last as PlaidML's library: convolutions (NHWC data, HWIO
filters, any number of spatial dimensions), pooling, softmax, normalisation and losses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from tile.ops.elementwise import exp, log, sqrt, where
from tile.ops.graph import (
    Dim,
    Operand,
    OpsError,
    Value,
    apply,
    as_value,
    contraction,
    dim_op,
    dim_text,
)
from tile.ops.shapes import Axes, max, mean, reshape, sum

Padding = Union[str, Sequence[tuple[int, int]]]  # noqa: UP007 (evaluated at run time on 3.10)
PerAxis = Union[int, Sequence[int]]  # noqa: UP007


def _per_axis(value: PerAxis, count: int, what: str) -> list[int]:
    values = [value] * count if isinstance(value, int) else list(value)
    if len(values) != count or any(v < 1 for v in values):
        raise OpsError(f"{what} needs {count} positive ints, not {value}")
    return values


def _dim_max0(size: Dim) -> Dim:
    """max(size, 0), folded for an int."""
    return (size if size >= 0 else 0) if isinstance(size, int) else f"max({size}, 0)"


def _window(
    sizes: Sequence[Dim],
    kernel: Sequence[Dim],
    strides: list[int],
    dilation: list[int],
    padding: Padding,
) -> tuple[list[Dim], list[Dim]]:
    """Output sizes and the padding before each spatial axis of a sliding window."""
    outputs: list[Dim] = []
    befores: list[Dim] = []
    for axis, (size, k) in enumerate(zip(sizes, kernel, strict=True)):
        s, d = strides[axis], dilation[axis]
        span = dim_op(dim_op(d, "*", dim_op(k, "-", 1)), "+", 1)  # d * (k - 1) + 1
        if padding == "valid":
            outputs.append(dim_op(dim_op(dim_op(size, "-", span), "/", s), "+", 1))
            befores.append(0)
        elif padding == "same":
            out = dim_op(dim_op(size, "+", s - 1), "/", s)
            total = dim_op(dim_op(dim_op(dim_op(out, "-", 1), "*", s), "+", span), "-", size)
            total = _dim_max0(total)
            outputs.append(out)
            befores.append(dim_op(total, "/", 2))
        elif not isinstance(padding, str):
            lo, hi = padding[axis]
            padded = dim_op(dim_op(size, "+", lo), "+", hi)
            outputs.append(dim_op(dim_op(dim_op(padded, "-", span), "/", s), "+", 1))
            befores.append(lo)
        else:
            raise OpsError(f'padding is "valid", "same" or (before, after) pairs, not {padding!r}')
    return outputs, befores


def _position(output: str, kernel: str, stride: int, dilation: int, before: Dim) -> str:
    text = output if stride == 1 else f"{stride} * {output}"
    text += f" + {kernel}" if dilation == 1 else f" + {dilation} * {kernel}"
    return text if before == 0 else f"{text} - {dim_text(before)}"


def conv(
    x: Operand,
    w: Operand,
    strides: PerAxis = 1,
    padding: Padding = "valid",
    dilation: PerAxis = 1,
    groups: int = 1,
) -> Value:
    """Convolution (cross-correlation, as every framework computes it) of `x` [N, *spatial,
    CI] with filters `w` [*kernel, CI / groups, CO]; `padding` "valid", "same" (TensorFlow's:
    the output has ceil(size / stride) elements, the extra padding after) or one (before,
    after) pair per spatial axis."""
    x, w = as_value(x), as_value(w)
    spatial = x.ndim - 2
    if spatial < 1 or w.ndim != spatial + 2:
        raise OpsError(
            f"conv needs x [N, *spatial, C] and w [*kernel, C, CO]: {x.shape}, {w.shape}"
        )
    strides_, dilation_ = (
        _per_axis(strides, spatial, "strides"),
        _per_axis(dilation, spatial, "dilation"),
    )
    sizes, befores = _window(x.shape[1:-1], w.shape[:-2], strides_, dilation_, padding)
    out_index = [f"x{a}" for a in range(spatial)]
    kernel_index = [f"k{a}" for a in range(spatial)]
    read = [
        _position(out_index[a], kernel_index[a], strides_[a], dilation_[a], befores[a])
        for a in range(spatial)
    ]
    channels = w.shape[-1]
    if groups == 1:
        ci, co = "ci", "co"
    else:
        per_group_out = dim_op(channels, "/", groups)
        ci = f"g * {dim_text(w.shape[-2])} + ci"
        co = f"g * {dim_text(per_group_out)} + co"
    shape = [x.shape[0], *sizes, channels]
    body = (
        f"{{out}}[n, {', '.join(out_index)}, {co}: {{sizes}}] = "
        f"+({{0}}[n, {', '.join(read)}, {ci}] * {{1}}[{', '.join(kernel_index)}, ci, {co}])"
    )
    if groups != 1:
        body += f", g < {groups}, co < {dim_text(dim_op(channels, '/', groups))}"
    return contraction(shape, body, x, w, hint="CONV")


def conv_transpose(
    x: Operand,
    w: Operand,
    strides: PerAxis = 1,
    padding: Padding = "valid",
    dilation: PerAxis = 1,
) -> Value:
    """The transposed convolution (the gradient of `conv` with respect to its input): `x` [N,
    *spatial, CI], filters `w` [*kernel, CO, CI] (TensorFlow's conv2d_transpose layout).
    Output sizes: (size - 1) * stride + dilation * (kernel - 1) + 1 for "valid", size * stride
    for "same", and less the padding for (before, after) pairs."""
    x, w = as_value(x), as_value(w)
    spatial = x.ndim - 2
    if spatial < 1 or w.ndim != spatial + 2:
        raise OpsError("conv_transpose needs x [N, *spatial, C] and w [*kernel, CO, C]")
    strides_, dilation_ = (
        _per_axis(strides, spatial, "strides"),
        _per_axis(dilation, spatial, "dilation"),
    )
    sizes: list[Dim] = []
    befores: list[Dim] = []
    for axis in range(spatial):
        size, k = x.shape[1 + axis], w.shape[axis]
        s, d = strides_[axis], dilation_[axis]
        full = dim_op(
            dim_op(dim_op(dim_op(size, "-", 1), "*", s), "+", dim_op(d, "*", dim_op(k, "-", 1))),
            "+",
            1,
        )
        if padding == "valid":
            sizes.append(full)
            befores.append(0)
        elif padding == "same":
            total = dim_op(full, "-", dim_op(size, "*", s))
            total = _dim_max0(total)
            sizes.append(dim_op(size, "*", s))
            befores.append(dim_op(total, "/", 2))
        elif not isinstance(padding, str):
            lo, hi = padding[axis]
            sizes.append(dim_op(dim_op(full, "-", lo), "-", hi))
            befores.append(lo)
        else:
            raise OpsError(f'padding is "valid", "same" or (before, after) pairs, not {padding!r}')
    out_index = [
        _position(f"x{a}", f"k{a}", strides_[a], dilation_[a], befores[a]) for a in range(spatial)
    ]
    shape = [x.shape[0], *sizes, w.shape[-2]]
    kernel = ", ".join(f"k{a}" for a in range(spatial))
    inputs = ", ".join(f"x{a}" for a in range(spatial))
    body = (
        f"{{out}}[n, {', '.join(out_index)}, co: {{sizes}}] = "
        f"+({{0}}[n, {inputs}, ci] * {{1}}[{kernel}, co, ci])"
    )
    return contraction(shape, body, x, w, hint="CONVT")


def _pool(agg: str, x: Value, window: PerAxis, strides: PerAxis | None, padding: Padding) -> Value:
    spatial = x.ndim - 2
    if spatial < 1:
        raise OpsError(f"pooling needs x [N, *spatial, C], not {x.shape}")
    window_ = _per_axis(window, spatial, "window")
    strides_ = window_ if strides is None else _per_axis(strides, spatial, "strides")
    sizes, befores = _window(x.shape[1:-1], window_, strides_, [1] * spatial, padding)
    out_index = [f"x{a}" for a in range(spatial)]
    read = [_position(f"x{a}", f"k{a}", strides_[a], 1, befores[a]) for a in range(spatial)]
    limits = ", ".join(f"k{a} < {window_[a]}" for a in range(spatial))
    shape = [x.shape[0], *sizes, x.shape[-1]]
    body = (
        f"{{out}}[n, {', '.join(out_index)}, c: {{sizes}}] = "
        f"{agg}({{0}}[n, {', '.join(read)}, c]), {limits}"
    )
    return contraction(shape, body, x, hint="POOL")


def max_pool(
    x: Operand, window: PerAxis, strides: PerAxis | None = None, padding: Padding = "valid"
) -> Value:
    """The maximum over each window of x [N, *spatial, C] (strides default to the window;
    padded positions take no part)."""
    return _pool(">", as_value(x), window, strides, padding)


def avg_pool(
    x: Operand, window: PerAxis, strides: PerAxis | None = None, padding: Padding = "valid"
) -> Value:
    """The mean over each window of x [N, *spatial, C]; padded positions are not counted
    (TensorFlow's rule, PyTorch's count_include_pad=False)."""
    x = as_value(x)
    total = _pool("+", x, window, strides, padding)
    count = _pool("+", where(x, 1.0, 1.0), window, strides, padding)
    return total / count


def softmax(x: Operand, axis: int = -1) -> Value:
    x = as_value(x)
    shifted = x - max(x, axis, keepdims=True)
    powers = exp(shifted)
    return powers / sum(powers, axis, keepdims=True)


def log_softmax(x: Operand, axis: int = -1) -> Value:
    x = as_value(x)
    shifted = x - max(x, axis, keepdims=True)
    return shifted - log(sum(exp(shifted), axis, keepdims=True))


def layer_norm(
    x: Operand,
    axis: Axes = -1,
    weight: Operand | None = None,
    bias: Operand | None = None,
    eps: float = 1e-5,
) -> Value:
    """(x - mean) / sqrt(variance + eps) over `axis` (the last by default), then times
    `weight` and plus `bias` (broadcast from the right)."""
    x = as_value(x)
    centred = x - mean(x, axis, keepdims=True)
    variance = mean(centred * centred, axis, keepdims=True)
    y = centred / sqrt(variance + float(eps))
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


def batch_norm(
    x: Operand,
    mean: Operand,
    var: Operand,
    weight: Operand | None = None,
    bias: Operand | None = None,
    eps: float = 1e-5,
) -> Value:
    """Inference-time batch normalisation with given statistics, channels last:
    (x - mean) / sqrt(var + eps) * weight + bias."""
    y = (as_value(x) - mean) / sqrt(as_value(var) + float(eps))
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


def cross_entropy(logits: Operand, target: Operand, axis: int = -1) -> Value:
    """The mean cross-entropy of softmax(logits) along `axis` against `target`: class indices
    (int32, the logits' shape without `axis`) or probabilities (the logits' shape)."""
    logits, target = as_value(logits), as_value(target)
    axis = logits.axis(axis)
    logp = log_softmax(logits, axis)
    if target.ndim == logits.ndim - 1:
        expanded = reshape(target, [*target.shape[:axis], 1, *target.shape[axis:]])
        target = where(apply(f"index({{0}}, {axis}) == {{1}}", logits, expanded), 1.0, 0.0)
    elif target.ndim != logits.ndim:
        raise OpsError(f"cross_entropy: target {target.shape} for logits {logits.shape}")
    count = dim_op(1, "*", 1)
    for k, size in enumerate(logits.shape):
        if k != axis:
            count = dim_op(count, "*", size)
    total = sum(target * logp)
    return apply(f"-{{0}} / {dim_text(count)}", total)


def mse_loss(a: Operand, b: Operand) -> Value:
    """The mean of (a - b)^2 over every element."""
    difference = as_value(a) - b
    return mean(difference * difference)

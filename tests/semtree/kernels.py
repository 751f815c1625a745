"""Sample kernels in the shapes the generator produces (PERFORMANCE.md 2 and 3): shared by the
printer golden tests and the reference-interpreter tests."""

from __future__ import annotations

from semtree import builder as sb
from semtree.nodes import Builtin, Function
from semtree.types import DType, Region, Type, TypeBase

F32 = DType.FLOAT32


def elementwise_vec4(count: int) -> Function:
    """out[i] = relu(a[i] * 2 + b[i]) on float4 vectors, one vector per work-item."""
    i, x = sb.global_id(0), sb.var("x")
    a, b, out = sb.var("a"), sb.var("b"), sb.var("out")
    return sb.function(
        "scale_add_relu",
        [
            ("out", Type.ptr(F32, 4)),
            ("a", Type.ptr(F32, 4, const=True)),
            ("b", Type.ptr(F32, 4, const=True)),
        ],
        sb.if_(
            i.lt(count // 4),
            [
                sb.declare(Type.value(F32, 4), "x", a[i] * 2.0 + b[i]),
                sb.assign(out[i], sb.select(x.lt(0.0), 0.0, x)),
            ],
        ),
    )


def matmul_tile(m: int, n: int, k: int, rows: int = 2, vectors: int = 2) -> Function:
    """C = A @ B with a rows x (4 * vectors) register tile of float4 accumulators and MAD;
    work-item (jt, it) computes the tile at rows it*rows.., columns jt*4*vectors.."""
    width = 4
    stride = n // width  # C and B rows in float4 units
    jt, it = sb.global_id(0), sb.global_id(1)
    kk, r, v = sb.var("k"), sb.var("r"), sb.var("v")
    agg, bv, av = sb.var("agg"), sb.var("b_row"), sb.var("a_value")
    a, b4, c4 = sb.var("A"), sb.var("B"), sb.var("C")
    tile = Type(TypeBase.VALUE, F32, width, rows * vectors)
    return sb.function(
        "matmul_tile",
        [
            ("C", Type.ptr(F32, width)),
            ("A", Type.ptr(F32, const=True)),
            ("B", Type.ptr(F32, width, const=True)),
        ],
        [
            sb.declare(tile, "agg", 0.0),
            sb.for_(
                "k",
                k,
                body=[
                    sb.declare(Type(TypeBase.VALUE, F32, width, vectors), "b_row"),
                    sb.for_(
                        "v", vectors, body=sb.assign(bv[v], b4[kk * stride + jt * vectors + v])
                    ),
                    sb.for_(
                        "r",
                        rows,
                        body=[
                            sb.declare(F32, "a_value", a[(it * rows + r) * k + kk]),
                            sb.for_(
                                "v",
                                vectors,
                                body=sb.assign(
                                    agg[r * vectors + v],
                                    sb.call(Builtin.MAD, av, bv[v], agg[r * vectors + v]),
                                ),
                            ),
                        ],
                    ),
                ],
            ),
            sb.for_(
                "r",
                rows,
                body=sb.for_(
                    "v",
                    vectors,
                    body=sb.assign(
                        c4[(it * rows + r) * stride + jt * vectors + v], agg[r * vectors + v]
                    ),
                ),
            ),
        ],
    )


def group_sum(count: int, group: int) -> Function:
    """out[g] = sum of in[g * group ...] over each work-group, through local memory, a tree
    of barriers and `If`s; `group` is a power of two."""
    lid, gid, grp = sb.local_id(0), sb.global_id(0), sb.group_id(0)
    tile, step, source, out = sb.var("tile"), sb.var("step"), sb.var("in"), sb.var("out")
    half = sb.var("half")
    levels = group.bit_length() - 1
    return sb.function(
        "group_sum",
        [("out", Type.ptr(F32)), ("in", Type.ptr(F32, const=True))],
        [
            sb.declare(Type(TypeBase.VALUE, F32, array=group, region=Region.LOCAL), "tile"),
            sb.assign(tile[lid], sb.cond(gid.lt(count), source[gid], 0.0)),
            sb.barrier(),
            sb.for_(
                "step",
                levels,
                body=[
                    sb.declare(Type.index(), "half", sb.const(group // 2) >> step),
                    sb.if_(lid.lt(half), sb.assign(tile[lid], tile[lid] + tile[lid + half])),
                    sb.barrier(),
                ],
            ),
            sb.if_(lid.eq(0), sb.assign(out[grp], tile[0])),
        ],
    )

"""Stage 3, lowering: `BoundProgram` -> `semtree.KernelList` for a device's settings.

Fusion plans kernels (`fuse`), each contraction is flattened (`flatten`), tiled (`tiles`)
and generated as a semtree body: generic (`contract`; transpositions in register blocks,
`transpose`), register-tiled vector (`vector`) with packed operands (`pack`) and outputs relaid
for it (`relayout`; depthwise NCHW channels last first, `channels`), split reductions
(`split`), special ops
(`special`), GPU-style work-group kernels (`gpu`). `generate.generate_program` is the entry
point; `schedule` says which buffer each kernel parameter names. Needs no device.
"""

"""Stage 2, binding: checked AST + the caller's inputs -> `tile.bind.binder.program.BoundProgram`.

Fixes dimension sizes, folds constants, resolves broadcasting and element types,
turns index expressions into exact rational polynomials and bounds every index
variable. Only shapes, dtypes and scalar values are read from the inputs.
`tile.bind.binder.function.Function` is the front end's entry point (source -> bound program).
"""

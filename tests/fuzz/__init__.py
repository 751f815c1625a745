"""Differential fuzzing: random Tile programs on every device against the reference evaluator.

`programs` draws a case (Tile source and inputs) from a seed and a case index, one family of
programs per kernel-generation path; `check` runs a case on a device, outputs poisoned
first, and compares with `tile.reference` (numpy, float64); `runner` runs many cases in
worker processes, so that a crash of one case is a recorded failure and the run goes on.

    python -m tests.fuzz --cases 10000 --device llvm_cpu.0    # the long pass (`make fuzz`)
    python -m tests.fuzz --seed 7 --case 1234 --device opencl.0 --gpu   # one reproducer
"""

"""Stage 4, running: devices, tensors, the program cache and invocations.

`api` (devices, tensors), `invoke` (Function, Invoker, run), `cache` (compiled
programs by signature), `execute` (compiled programs and their launches),
`device` (buffer states, host jobs, one device's bookkeeping), `debug` (TILE_DEBUG,
TILE_DUMP_DIR). The only part of tile that talks to `hal`.
"""

"""The public Python API, part 2 (design 9): functions, invokers, invocations, `run`.

Place in the pipeline: calling a `Function` or invoking an `Invoker` turns the inputs into a
signature (tile.runtime.cache), finds or builds the compiled program for it on the device (binding,
`tile.lower.generate`, the device's compiler: tile.runtime.device) and schedules one asynchronous
run whose outputs are tensors (tile.runtime.api). A cached call costs a key look-up and the
launches; an
`Invoker` whose signature has not changed skips even the look-up (8.9).
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING

from semtree.types import DType, TensorShape
from tile.bind.function import Function as FrontEndFunction
from tile.bind.function import front_end
from tile.bind.inputs import unknown_input
from tile.errors import DeviceMismatch, TileBindError, diagnostic, warn
from tile.lang.syntax import FunctionDef
from tile.runtime import debug, store
from tile.runtime.api import Device, DeviceLike, InputValue, Tensor, device, resolve
from tile.runtime.cache import (
    FUNCTION_CACHE_SIZE,
    LRUCache,
    ProgramKey,
    input_signature,
    source_hash,
)
from tile.runtime.compiled import CompiledFunction, SymbolicSpec, TensorSpec, signature_entry
from tile.runtime.execute import compile_program, load_program, save_program
from tile.runtime.launch import Invocation, PreparedRun, launch

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

    from tile.bind.program import BoundProgram
    from tile.errors import Diagnostic
    from tile.runtime.cache import SignatureEntry
    from tile.runtime.device import DeviceRuntime
    from tile.runtime.dynamic import DynamicFunction
    from tile.runtime.execute import CompiledProgram


# ---- functions ------------------------------------------------------------------------------


class Function(FrontEndFunction):
    """A Tile function: parsed and checked on construction (TileSyntaxError, TileTypeError),
    compiled lazily per device and input signature, run by calling it. Its warnings
    (`warnings`: W-PREC, W-DEAD) are also issued through Python's `warnings` as
    `tile.TileWarning`s, once per place in the caller's code."""

    def __init__(self, source: str, name: str | None = None, *, floatx: object = "float32"):
        super().__init__(source, floatx=floatx)
        for warning in self.warnings:  # W-PREC, W-DEAD: also through Python's `warnings`
            warn(warning)
        self.name = name or "tile_fn"  # shown in errors and profiles
        self.source_hash = source_hash(source, self.floatx.value)
        # The last call's (device argument, signature) and its device and program key: a
        # repeated call skips the Invoker's checks and finds its program by that key.
        self._last: tuple[tuple, Device, ProgramKey] | None = None
        # For the last call whose inputs were all tensors: its device argument and its
        # program's PreparedRun, which repeats such a call by the shortest path there is.
        self._prepared: tuple[DeviceLike, weakref.ref[PreparedRun]] | None = None

    def _front_end(self, source: str) -> tuple[FunctionDef, tuple[Diagnostic, ...]]:
        return _checked(source)

    def bind(self, inputs: Mapping[str, object] | None = None, **named: object) -> BoundProgram:
        """Device-free binding (see `tile.bind.function.Function.bind`); a `Tensor` binds by its
        shape and dtype."""
        given = {**(inputs or {}), **named}
        return super().bind({name: _bind_value(value) for name, value in given.items()})

    def __call__(
        self, *args: InputValue, device: DeviceLike = None, **inputs: InputValue
    ) -> dict[str, Tensor]:
        """Run asynchronously and return new output tensors by name.

        Inputs bind positionally in the order the function declares them (`fn(a, b)`), by
        name (`fn(A=a, B=b)`), or both; the device is given only by keyword. numpy arrays of
        rank >= 1 are uploaded first; plain numbers and 0-d arrays bind as constants (spec
        6.3), compiled in by value (pass a 0-d Tensor for a value that changes every call).
        The device is that of the tensor inputs (which must agree, and agree with `device` if
        given: DeviceMismatch), else `device`, else the default. Reading an output waits for
        it. Too many positional inputs, or one given twice, is a TypeError.
        """
        named = self.named_inputs(args, inputs)  # a subclass may add some (gradients)
        prepared = self._prepared
        if prepared is not None and (device is prepared[0] or device == prepared[0]):
            run = prepared[1]()  # None once its program is gone
            if run is not None:
                outputs = run.repeat(named)
                if outputs is not None:
                    return outputs
        key = self._repeat_key(named, device)
        last = self._last
        if key is not None and last is not None and last[0] == key:
            _, run_device, program_key = last
            program = run_device.runtime.programs.get(program_key)  # None once evicted
            if program is not None:
                outputs = launch(run_device, program, named, {}, self.name).outputs
                self._prepare(named, key, run_device, program)
                return outputs
        invoker = Invoker(self, named, device=device)
        outputs = invoker.invoke().outputs
        if key is not None and invoker._program is not None:
            run_device = invoker._program_device
            assert run_device is not None
            self._last = (key, run_device, invoker._program.key)
            self._prepare(named, key, run_device, invoker._program)
        return outputs

    def _prepare(
        self,
        named: Mapping[str, InputValue],
        key: tuple,
        run_device: Device,
        program: CompiledProgram,
    ) -> None:
        """Let the next call like this one repeat it by the program's `PreparedRun` (made
        once per program), if every input is a tensor; a call with other inputs leaves the
        last one prepared. The run is held weakly: the program cache alone keeps programs."""
        if not all(isinstance(named[name], Tensor) for name in self.inputs):
            return
        run = program.prepared
        if run is None:
            expected = tuple(zip(self.inputs, key[2], strict=True))
            run = program.prepared = PreparedRun.of(run_device, program, expected)
            if run is None:
                return
        self._prepared = (key[0], weakref.ref(run))

    def _repeat_key(self, named: Mapping[str, InputValue], device: DeviceLike) -> tuple | None:
        """What a call must share with the last one to reuse its program without checks: the
        device argument (None, a Device, or the id of the tensors' device), the device of the
        tensor inputs (at least one), and the signature of every input. None: take the full
        path (debug logging on, an input missing, a device named otherwise, no tensor,
        tensors on several devices)."""
        if debug.level() or len(named) != len(self.inputs):
            return None
        if device is not None and not isinstance(device, Device | str):
            return None
        entries = []
        tensors_on = None  # the device of the tensor inputs
        for name in self.inputs:  # declaration order: the same key whatever the keyword order
            value = named.get(name)
            if value is None:
                return None  # an unknown name in place of this one: the full path reports it
            if isinstance(value, Tensor):
                if tensors_on is None:
                    tensors_on = value.device
                elif value.device is not tensors_on:
                    return None  # DeviceMismatch, raised by the full path
                entries.append(value._entry)
            else:
                entries.append(signature_entry(value))
        if tensors_on is None or (isinstance(device, str) and device != tensors_on.id):
            return None  # a selector ("opencl:pocl"), or another device: the full path
        return (device, tensors_on, tuple(entries))

    def compile(
        self, *args: InputValue | TensorSpec, device: DeviceLike = None, **inputs: object
    ) -> CompiledFunction | DynamicFunction:
        """Compile for one input signature on one device (None: the default, or that of the
        tensor inputs) and return a `CompiledFunction`: callable with inputs of that
        signature, and `save`-able as a bundle (`tile.load`). Inputs bind like a call's;
        `tile.spec(shape, dtype)` stands for a tensor input without data. A spec whose first
        dimension is a name (`tile.spec(("N", 128))`) makes it a `DynamicFunction`, compiled
        once for every size of that batch dimension (`tile.runtime.dynamic`)."""
        named = self.named_inputs(args, inputs)  # type: ignore[arg-type]
        if any(isinstance(value, SymbolicSpec) for value in named.values()):
            from tile.runtime.dynamic_compile import compile_dynamic

            return compile_dynamic(self, resolve(device), named)
        invoker = Invoker(self, named, device=device)  # type: ignore[arg-type]
        program = invoker._program_for(invoker._run_device())
        signature = tuple((name, invoker._signature[name]) for name in self.inputs)
        device_ = invoker._program_device
        assert device_ is not None
        return CompiledFunction(self.name, self.source, device_, signature, program)

    def named_inputs(
        self, args: tuple[InputValue, ...], inputs: Mapping[str, InputValue]
    ) -> dict[str, InputValue]:
        """The inputs of a call by name: `args` bound in declaration order, then `inputs`."""
        if not args:
            return dict(inputs)
        names = self.inputs
        if len(args) > len(names):
            declared = ", ".join(names) or "none"
            raise TypeError(
                f"{self.name}() takes {len(names)} input{'s' if len(names) != 1 else ''} "
                f"({declared}), but {len(args)} were given positionally"
            )
        for value in args:
            if isinstance(value, (str, Device)):
                raise TypeError(
                    f"{self.name}(): the device is given by keyword (device={value!r}); "
                    "positional arguments are inputs"
                )
        named = dict(zip(names, args, strict=False))
        for name, value in inputs.items():
            if name in named:
                raise TypeError(f"{self.name}() got two values for input '{name}'")
            named[name] = value
        return named

    def __repr__(self) -> str:
        return f"Function({self.source!r}, name={self.name!r})"


@functools.lru_cache(maxsize=256)
def _checked(source: str) -> tuple[FunctionDef, tuple[Diagnostic, ...]]:
    """The front end of `source`: from the disk cache when a process stored it, else parsed
    and checked, then stored (only sources that pass are: errors are always reported)."""
    stored = store.load_front_end(source)
    if isinstance(stored, tuple) and len(stored) == 2 and isinstance(stored[0], FunctionDef):
        return stored
    checked = front_end(source)
    store.save_front_end(source, checked)
    return checked


# ---- invokers and invocations ---------------------------------------------------------------


class Invoker:
    """Binds a Function's inputs and outputs to values and runs it, reusing the compiled
    program while the bound shapes, dtypes and constant values stay the same.

    Inputs are tensors, numpy arrays of rank >= 1 (uploaded on every `invoke`), or scalar
    constants (numbers, 0-d arrays). Outputs not set explicitly are allocated per `invoke`.
    A failed `set_*` changes nothing.
    """

    def __init__(
        self,
        function: Function | str,
        inputs: Mapping[str, InputValue] | None = None,
        outputs: Mapping[str, Tensor] | None = None,
        device: DeviceLike = None,
    ) -> None:
        self.function = function_for(function)
        self._device = None if device is None else resolve(device)
        self._inputs: dict[str, InputValue] = {}
        self._signature: dict[str, SignatureEntry] = {}
        self._outputs: dict[str, Tensor] = {}
        # The program of the current signature (and the device it was found for), and the
        # bound program while nothing is compiled yet.
        self._program: CompiledProgram | None = None
        self._program_device: Device | None = None
        self._bound: BoundProgram | None = None
        if inputs:
            self.set_inputs(inputs)
        if outputs:
            self.set_outputs(outputs)

    def set_input(self, name: str, value: InputValue) -> None:
        self.set_inputs({name: value})

    def set_inputs(self, inputs: Mapping[str, InputValue]) -> None:
        entries = {}
        for name, value in inputs.items():
            if name not in self.function.inputs:
                message, place = unknown_input(name, self.function.ast.inputs)
                raise TileBindError(diagnostic("E-BIND", message, place, self.function.source))
            entries[name] = signature_entry(value)
        self._check_devices({**self._inputs, **inputs}, self._outputs)
        for name, value in inputs.items():
            self._inputs[name] = value
            if self._signature.get(name) != entries[name]:
                self._signature[name] = entries[name]
                self._program = self._bound = None

    def get_output_shape(self, name: str) -> tuple[tuple[int, ...], np.dtype]:
        """Shape and dtype output `name` will have, given the inputs set so far (all must
        be set). Compiles nothing."""
        shapes = self._output_shapes()
        if name not in shapes:
            raise self._bind_error(f"there is no output named '{name}'", None)
        return shapes[name]

    def set_output(self, name: str, tensor: Tensor) -> None:
        self.set_outputs({name: tensor})

    def set_outputs(self, outputs: Mapping[str, Tensor]) -> None:
        """Write outputs into these tensors. A tensor's shape must be the output's (E-BIND;
        checked now if every input is set, else by `invoke`); its dtype may differ: values
        are converted on store (spec 6.4)."""
        for name, tensor in outputs.items():
            if name not in self.function.outputs:
                raise self._bind_error(f"there is no output named '{name}'", None)
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"output '{name}' must be a tile.Tensor, not {type(tensor).__name__}"
                )
        merged = {**self._outputs, **outputs}
        seen: dict[int, str] = {}
        for name, tensor in merged.items():
            other = seen.setdefault(id(tensor), name)
            if other != name:
                raise self._bind_error(
                    f"outputs '{other}' and '{name}' are bound to the same tensor", name
                )
        self._check_devices(self._inputs, merged)
        if all(name in self._inputs for name in self.function.inputs):
            shapes = self._output_shapes()
            for name, tensor in outputs.items():
                self._check_output(name, tensor, shapes[name][0])
        self._outputs = merged

    def invoke(self) -> Invocation:
        """Compile if needed, then schedule one run and return at once. Outputs not set
        explicitly are new tensors, found in `Invocation.outputs`."""
        device = self._run_device()
        program = self._program_for(device)
        for plan in program.schedule.outputs:
            tensor = self._outputs.get(plan.name)
            if tensor is not None and tensor.shape != plan.shape.dims:
                self._check_output(plan.name, tensor, plan.shape.dims)
        return launch(device, program, self._inputs, self._outputs, self.function.name)

    # ---- internals ------------------------------------------------------------------------

    def _run_device(self) -> Device:
        if self._device is not None:
            return self._device
        for value in (*self._inputs.values(), *self._outputs.values()):
            if isinstance(value, Tensor):
                return value.device
        return device()

    def _program_for(self, device: Device) -> CompiledProgram:
        program = self._program
        if program is not None and self._program_device is device:
            return program
        runtime = device.runtime
        signature = input_signature(self._signature.items())
        key = ProgramKey(self.function.source_hash, signature, device.id, runtime.fingerprint)
        program = runtime.programs.get(key)
        if debug.enabled(debug.TIMES):
            event = "hit" if program is not None else "miss, compiling"
            debug.emit(
                debug.TIMES, "program cache %s: %s on %s", event, self.function.name, device.id
            )
        if program is None:
            label = self.function.name
            with debug.progress(f"compiling {label} for {device.id}"):
                program = runtime.programs.get_or_build(
                    key, lambda: self._load_or_compile(runtime, key)
                )
        self._program, self._program_device = program, device
        return program

    def _load_or_compile(self, runtime: DeviceRuntime, key: ProgramKey) -> CompiledProgram:
        """The program of `key` from the disk cache, else bound, compiled and stored."""
        label = self.function.name
        program = load_program(runtime, key, label)
        if program is None:
            program = compile_program(runtime, key, self._bind(), label)
            save_program(runtime, program)
        return program

    def _bind(self) -> BoundProgram:
        if self._bound is None:
            values = {name: _bind_value(value) for name, value in self._inputs.items()}
            self._bound = self.function.bind(values)
        return self._bound

    def _output_shapes(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        if self._program is not None:
            return self._program.output_shapes
        return self._bind().outputs

    def _check_output(self, name: str, tensor: Tensor, dims: tuple[int, ...]) -> None:
        if tensor.shape != tuple(dims):
            raise self._bind_error(
                f"output '{name}' has shape {list(dims)}, but the tensor bound to it has "
                f"shape {list(tensor.shape)}",
                name,
            )

    def _check_devices(self, inputs: Mapping[str, object], outputs: Mapping[str, Tensor]) -> None:
        placed = {name: value.device for name, value in inputs.items() if isinstance(value, Tensor)}
        placed.update((name, tensor.device) for name, tensor in outputs.items())
        wanted = self._device
        if wanted is None and placed:
            wanted = next(iter(placed.values()))
        strays = [f"'{name}' on {dev.id}" for name, dev in placed.items() if dev is not wanted]
        if strays:
            assert wanted is not None
            raise DeviceMismatch(
                f"the tensors of one call must live on one device ({wanted.id}), but "
                f"{', '.join(strays)}"
            )

    def _bind_error(self, message: str, name: str | None) -> TileBindError:
        spans = {decl.name: decl.span for decl in self.function.ast.inputs}
        spans.update((output.name, output.span) for output in self.function.ast.outputs)
        return TileBindError(
            diagnostic("E-BIND", message, spans.get(name or ""), self.function.source)
        )


def _bind_value(value: object) -> object:
    # Binding reads only shapes, dtypes and constant values.
    if isinstance(value, Tensor):
        return TensorShape(DType.of(value.dtype), value.shape)
    if isinstance(value, TensorSpec):
        return value.tensor_shape
    return value


_functions: LRUCache[str, Function] = LRUCache(FUNCTION_CACHE_SIZE)


def function_for(source: str | FrontEndFunction) -> Function:
    """A public Function for `source`: the same object for the same text (cached)."""
    if isinstance(source, Function):
        return source
    if isinstance(source, FrontEndFunction):
        return Function(source.source, floatx=source.floatx)
    if not isinstance(source, str):
        raise TypeError(f"a Tile function is a str or a tile.Function, not {type(source).__name__}")
    return _functions.get_or_build(source, lambda: Function(source))


def run(
    source: str | Function, inputs: Mapping[str, InputValue], device: DeviceLike = None
) -> dict[str, np.ndarray]:
    """Upload, run, wait, download: every output as a new numpy array.

    Repeated calls with the same source and input signature reuse the compiled program
    (Function objects are cached by source text).
    """
    invocation = Invoker(function_for(source), inputs, device=device).invoke()
    invocation.wait()
    return {name: tensor.to_numpy() for name, tensor in invocation.outputs.items()}

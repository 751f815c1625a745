"""The compute threads' native meeting point: split launches handed to helper threads that
wait, claim slices and run them without the GIL (7.4).

Place in the pipeline: `runtime.CpuRuntime` makes one `NativePool` per device where the
host can have one (Linux on x86-64 or AArch64: `available`), and its helper threads spend
their lives inside `NativePool.work`. A split launch of a native grid entry point is then
one ctypes call on the launching thread, `NativePool.launch`, which posts it, claims and
runs slices, and waits until every slice has finished, all in native code.

Why: with Python helpers, waking one cost two hand-overs in series, the wake-up from the
queue and then the GIL, which the launching thread held until it entered its own slices:
29 µs back to back, 89 µs after 10 ms idle, on a 2-core VM (Intel Xeon), where a bare
futex wake-up takes 14 and 55 µs. A matvec 1000 (160 µs on one core) ran its second thread
for less than half of the launch. Here a helper waits on a futex word and runs the launch
without taking the GIL at all; it first spins on that word for a while (`spin` rounds of
a `pause`) so that the next kernel of a program, or the next call, finds it awake.

The mailbox, one array of int64 per pool (byte offsets; the futex words are int32, each
on its own cache line):

    0   claim word: generation << 32 | slices << 16 | next slice (one CAS claims a slice)
    8   grid entry point    16 params    24 work-groups    32 libc `syscall`
    40  generation (the poster's)        48 kind: 0 native launch, 1 Python launch, 2 stop
    64  finished slices (futex)          68 the launcher sleeps on it
    128 bell: posts so far (futex)       132 helpers asleep on it

A slice is claimed by a compare-and-swap of the claim word that still holds the generation
and the slice count the helper read with it, so a helper that wakes late can never run a
slice of a launch that has finished: the poster rewrites the fields only once every slice
of the previous launch has finished, which no unclaimed slice allows. A launch with a
Python entry point (tests) is posted as `kind` 1: the helpers return to Python and take it
from the runtime's queue.
"""

from __future__ import annotations

import ctypes
import functools
import math
import platform
import sys
import threading
import time

from hal_llvm.compiler import compile_module

# Linux's futex system call number and the private wait and wake operations.
_FUTEX_CALLS = {"x86_64": 202, "aarch64": 98}
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129
# The instruction between two looks at a word a thread waits on (x86 `pause`, AArch64
# `yield`): it yields the core's pipeline to the other hardware thread and saves power.
_PAUSES = {
    "x86_64": ("call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()"),
    "aarch64": ("call void @llvm.aarch64.hint(i32 1)", "declare void @llvm.aarch64.hint(i32)"),
}
MAX_SLICES = 0xFFFF  # slices of one launch the claim word can count
_STOP, _PYTHON, _NATIVE = 2, 1, 0

_SOURCE = """
define internal void @futex(ptr %mb, ptr %word, i64 %op, i64 %value) {
  %sys.p = getelementptr i8, ptr %mb, i64 32
  %sys = load ptr, ptr %sys.p, align 8
  %r = call i64 (i64, ...) %sys(i64 FUTEX, ptr %word, i64 %op, i64 %value,
                                ptr null, ptr null, i64 0)
  ret void
}

define void @tile_claim_run(ptr %mb) {
entry:
  %grid.p = getelementptr i8, ptr %mb, i64 8
  %params.p = getelementptr i8, ptr %mb, i64 16
  %groups.p = getelementptr i8, ptr %mb, i64 24
  %finished.p = getelementptr i8, ptr %mb, i64 64
  %joiner.p = getelementptr i8, ptr %mb, i64 68
  br label %claim
claim:
  %w = load atomic i64, ptr %mb acquire, align 8
  %index = and i64 %w, 65535
  %high = lshr i64 %w, 16
  %slices = and i64 %high, 65535
  %more = icmp ult i64 %index, %slices
  br i1 %more, label %try, label %done
try:
  %grid = load atomic ptr, ptr %grid.p monotonic, align 8
  %params = load atomic ptr, ptr %params.p monotonic, align 8
  %groups = load atomic i64, ptr %groups.p monotonic, align 8
  %w1 = add i64 %w, 1
  %pair = cmpxchg ptr %mb, i64 %w, i64 %w1 seq_cst seq_cst
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %run, label %claim
run:
  %first = mul i64 %index, %groups
  %begin = udiv i64 %first, %slices
  %following = add i64 %index, 1
  %last = mul i64 %following, %groups
  %end = udiv i64 %last, %slices
  call void %grid(ptr %params, i64 %begin, i64 %end)
  %f = atomicrmw add ptr %finished.p, i32 1 seq_cst
  %f1 = add i32 %f, 1
  %f1w = zext i32 %f1 to i64
  %all = icmp eq i64 %f1w, %slices
  br i1 %all, label %check_joiner, label %claim
check_joiner:
  %sleeping = load atomic i32, ptr %joiner.p seq_cst, align 4
  %asleep = icmp ne i32 %sleeping, 0
  br i1 %asleep, label %wake_joiner, label %claim
wake_joiner:
  call void @futex(ptr %mb, ptr %finished.p, i64 FUTEX_WAKE, i64 1)
  br label %claim
done:
  ret void
}

define void @tile_post(ptr %mb, ptr %grid, ptr %params, i64 %groups, i64 %slices, i64 %kind) {
  %grid.p = getelementptr i8, ptr %mb, i64 8
  %params.p = getelementptr i8, ptr %mb, i64 16
  %groups.p = getelementptr i8, ptr %mb, i64 24
  %gen.p = getelementptr i8, ptr %mb, i64 40
  %kind.p = getelementptr i8, ptr %mb, i64 48
  %finished.p = getelementptr i8, ptr %mb, i64 64
  %bell.p = getelementptr i8, ptr %mb, i64 128
  %sleepers.p = getelementptr i8, ptr %mb, i64 132
  store atomic ptr %grid, ptr %grid.p monotonic, align 8
  store atomic ptr %params, ptr %params.p monotonic, align 8
  store atomic i64 %groups, ptr %groups.p monotonic, align 8
  store atomic i64 %kind, ptr %kind.p monotonic, align 8
  store atomic i32 0, ptr %finished.p monotonic, align 4
  %gen = load i64, ptr %gen.p, align 8
  %gen1 = add i64 %gen, 1
  %gen2 = and i64 %gen1, 4294967295
  store i64 %gen2, ptr %gen.p, align 8
  %g = shl i64 %gen2, 32
  %s = shl i64 %slices, 16
  %w = or i64 %g, %s
  store atomic i64 %w, ptr %mb release, align 8
  %b = atomicrmw add ptr %bell.p, i32 1 seq_cst
  %asleep = load atomic i32, ptr %sleepers.p seq_cst, align 4
  %any = icmp ne i32 %asleep, 0
  br i1 %any, label %wake, label %done
wake:
  call void @futex(ptr %mb, ptr %bell.p, i64 FUTEX_WAKE, i64 2147483647)
  br label %done
done:
  ret void
}

define void @tile_join(ptr %mb, i64 %slices, i64 %rounds) {
entry:
  %finished.p = getelementptr i8, ptr %mb, i64 64
  %joiner.p = getelementptr i8, ptr %mb, i64 68
  br label %spin
spin:
  %round = phi i64 [ 0, %entry ], [ %next, %pause ]
  %f = load atomic i32, ptr %finished.p acquire, align 4
  %fw = zext i32 %f to i64
  %all = icmp eq i64 %fw, %slices
  br i1 %all, label %done, label %more
more:
  %spent = icmp uge i64 %round, %rounds
  br i1 %spent, label %sleep, label %pause
pause:
  PAUSE
  %next = add i64 %round, 1
  br label %spin
sleep:
  store atomic i32 1, ptr %joiner.p seq_cst, align 4
  br label %check
check:
  %g = load atomic i32, ptr %finished.p seq_cst, align 4
  %gw = zext i32 %g to i64
  %done_now = icmp eq i64 %gw, %slices
  br i1 %done_now, label %awake, label %wait
wait:
  %gv = zext i32 %g to i64
  call void @futex(ptr %mb, ptr %finished.p, i64 FUTEX_WAIT, i64 %gv)
  br label %check
awake:
  store atomic i32 0, ptr %joiner.p seq_cst, align 4
  br label %done
done:
  ret void
}

define void @tile_launch(ptr %mb, ptr %grid, ptr %params, i64 %groups, i64 %slices, i64 %rounds) {
  call void @tile_post(ptr %mb, ptr %grid, ptr %params, i64 %groups, i64 %slices, i64 0)
  call void @tile_claim_run(ptr %mb)
  call void @tile_join(ptr %mb, i64 %slices, i64 %rounds)
  ret void
}

define void @tile_pause(ptr %word, i64 %rounds) {
entry:
  br label %loop
loop:
  %round = phi i64 [ 0, %entry ], [ %next, %loop ]
  %v = load atomic i32, ptr %word acquire, align 4
  PAUSE
  %next = add i64 %round, 1
  %spent = icmp uge i64 %next, %rounds
  br i1 %spent, label %done, label %loop
done:
  ret void
}

define i64 @tile_work(ptr %mb, i64 %rounds, i64 %seen) {
entry:
  %bell.p = getelementptr i8, ptr %mb, i64 128
  %sleepers.p = getelementptr i8, ptr %mb, i64 132
  %kind.p = getelementptr i8, ptr %mb, i64 48
  br label %wait
wait:
  %last = phi i64 [ %seen, %entry ], [ %now, %native ]
  %last32 = trunc i64 %last to i32
  br label %spin
spin:
  %round = phi i64 [ 0, %wait ], [ %next, %pause ]
  %b = load atomic i32, ptr %bell.p acquire, align 4
  %rang = icmp ne i32 %b, %last32
  br i1 %rang, label %got, label %more
more:
  %spent = icmp uge i64 %round, %rounds
  br i1 %spent, label %sleep, label %pause
pause:
  PAUSE
  %next = add i64 %round, 1
  br label %spin
sleep:
  %s0 = atomicrmw add ptr %sleepers.p, i32 1 seq_cst
  br label %check
check:
  %c = load atomic i32, ptr %bell.p seq_cst, align 4
  %rang2 = icmp ne i32 %c, %last32
  br i1 %rang2, label %woke, label %block
block:
  %lw = zext i32 %last32 to i64
  call void @futex(ptr %mb, ptr %bell.p, i64 FUTEX_WAIT, i64 %lw)
  br label %check
woke:
  %s1 = atomicrmw sub ptr %sleepers.p, i32 1 seq_cst
  br label %got
got:
  %nb = load atomic i32, ptr %bell.p acquire, align 4
  %now = zext i32 %nb to i64
  %kind = load atomic i64, ptr %kind.p monotonic, align 8
  %is_native = icmp eq i64 %kind, 0
  br i1 %is_native, label %native, label %leave
native:
  call void @tile_claim_run(ptr %mb)
  br label %wait
leave:
  %code = icmp eq i64 %kind, 1
  %c64 = zext i1 %code to i64
  %hi = shl i64 %c64, 32
  %result = or i64 %hi, %now
  ret i64 %result
}
DECLARE
"""

# tile_post and tile_launch: (mailbox, grid, params, groups, slices, kind or spinning rounds)
_MAILBOX_CALL = ctypes.CFUNCTYPE(
    None,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
)
_WORK = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_PAUSE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)

_lock = threading.Lock()
_CALIBRATION_ROUNDS = 20_000  # spinning rounds timed to learn one round's length


def available() -> bool:
    """Whether this host can run a native pool (Linux on x86-64 or AArch64)."""
    return sys.platform == "linux" and platform.machine() in _FUTEX_CALLS


class _Native:
    """The compiled module and its entry points (one per process)."""

    def __init__(self) -> None:
        machine = platform.machine()
        pause, declaration = _PAUSES[machine]
        source = (
            _SOURCE.replace("FUTEX_WAIT", str(_FUTEX_WAIT))
            .replace("FUTEX_WAKE", str(_FUTEX_WAKE))
            .replace("FUTEX", str(_FUTEX_CALLS[machine]))
            .replace("PAUSE", pause)
            .replace("DECLARE", declaration)
        )
        self.module = compile_module(source, name="tile_pool")  # kept alive with this object
        self.post = _MAILBOX_CALL(self.module.address("tile_post"))
        self.launch = _MAILBOX_CALL(self.module.address("tile_launch"))
        self.work = _WORK(self.module.address("tile_work"))
        self.pause = _PAUSE(self.module.address("tile_pause"))
        self.syscall = ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value
        self.round_seconds = self._calibrate()

    def _calibrate(self) -> float:
        """Seconds per spinning round (a look at a word and a pause), timed."""
        word = ctypes.c_int64(0)
        best = math.inf
        for _ in range(3):  # the least disturbed of three
            start = time.perf_counter()
            self.pause(ctypes.addressof(word), _CALIBRATION_ROUNDS)
            best = min(best, time.perf_counter() - start)
        return max(best / _CALIBRATION_ROUNDS, 1e-10)


@functools.cache
def _native() -> _Native:
    return _Native()


class NativePool:
    """One device's mailbox and its entry points (module docstring). Launches are posted by
    one thread at a time (the runtime's `_running` lock)."""

    def __init__(self, spin_seconds: float) -> None:
        with _lock:
            native = _native()
        self._native = native
        self._mailbox = (ctypes.c_int64 * 32)()
        self.address = ctypes.addressof(self._mailbox)
        self._mailbox[4] = native.syscall
        self.rounds = int(spin_seconds / native.round_seconds)

    def launch(self, grid: int, params: int, groups: int, slices: int) -> None:
        """Run work-groups [0, groups) in `slices` slices on this thread and the helpers;
        returns once every slice has finished."""
        slices = min(slices, MAX_SLICES)
        self._native.launch(self.address, grid, params, groups, slices, self.rounds)

    def post_python(self) -> None:
        """Send the helpers back to Python for a launch waiting in the runtime's queue."""
        self._native.post(self.address, None, None, 0, 0, _PYTHON)

    def stop(self) -> None:
        """Send the helpers back to Python for good."""
        self._native.post(self.address, None, None, 0, 0, _STOP)

    def bell(self) -> int:
        """The bell's count now: what a helper starting to work has seen."""
        return self._mailbox[16] & 0xFFFFFFFF

    def work(self, seen: int) -> tuple[bool, int]:
        """A helper's life: run every native launch posted after the bell count `seen`,
        until a Python launch (True) or the stop (False); with the bell count then."""
        result = self._native.work(self.address, self.rounds, seen)
        return bool(result >> 32), result & 0xFFFFFFFF

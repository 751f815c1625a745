"""The CPU device's in-order queue and thread pool: how launches run and events complete (7.4).

Place in the pipeline: `LLVMKernel.run`, `LLVMExecutor.copy` and `fill_zero` submit *jobs*
here and return an event at once: an `LLVMEvent`, or one already complete for a job that
ran inline (below). Threading design:

- **Scheduler**: one thread per device takes jobs in submission order (an in-order queue,
  like an OpenCL queue). For each job it waits for the dependencies (only foreign events
  can still be pending: an earlier job of this queue has always completed), skips the job
  with `DependencyFailed` if one failed, otherwise runs it and completes its event exactly
  once. The submitting thread never blocks.
- **Compute threads**: one per usable core: the thread that runs a launch (the scheduler,
  or the submitter for a short launch, below) plus `cores - 1` helper threads. A large
  launch is cut into `min(groups, 4 * cores)` contiguous slices of the work-group range that
  all of them take from one shared counter until none is left (a fixed per-thread share
  leaves one idle while a slow one works, PERFORMANCE.md 4.8). Where the host allows it, the
  helpers live in the native pool (`hal_llvm.pool`): they wait on a futex, spin first for
  `TILE_CPU_SPIN_US` (default 100 µs), and run slices without ever taking the GIL; a split
  launch is then one ctypes call on the launching thread. Elsewhere, and for entry points
  that are Python functions, they wait on a queue and each takes its slices in one ctypes
  call (`hal_llvm.slices`, `hal_llvm.split`), which releases the GIL. The helpers may run on
  any core but the launcher's (`hal_llvm.placement`).
- **Small launches** (one work-group, or less estimated work than `TILE_CPU_SPLIT_US`,
  default 200 µs, a few times the fork-join cost) run as one call on the scheduler.
- **Short launches** (less estimated work than `INLINE_SECONDS`, 2 ms) submitted while the
  queue is idle and their dependencies are complete run at once on the submitting thread
  (`inline=True`), which takes the scheduler's part in a split launch: the hand-offs to the
  scheduler and back (tens of µs on a VM) would cost as much as a short launch.
  Jobs still run one at a time and in submission order: the inline path is taken only with
  nothing queued or running, and holds the same `_running` lock as the scheduler.
- **Lifetimes**: a job holds the buffers, the parameter array and the JIT module it uses
  and drops them just before its event completes, so Python may drop its own references
  right after submitting.

Threads start on the first job and are daemons; `close()` (also called at interpreter
exit) lets the queued jobs finish and stops them. A fork waits (up to 10 s) for idle queues;
the child then starts its own threads on its first job (design 7.4).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING

from hal.errors import ExecutionError, HalError
from hal.events import CompletedEvent, FailedEvent, SettableEvent, dependency_failure
from hal_llvm.placement import HelperPlacement
from hal_llvm.split import SplitLaunch, native_address

if TYPE_CHECKING:
    import ctypes
    from collections.abc import Callable, Sequence

    from hal.interfaces import Event
    from hal_llvm.pool import NativePool

    GridEntry = Callable[[int, int, int], None]  # (params address, begin, end)
    # () -> the native loop (grid entry address, params, groups, slices, counter address)
    SliceRunner = Callable[[], Callable[[int, int, int, int, int], None]]

# Slices per compute thread: enough to absorb uneven progress on a shared machine while
# keeping each slice a contiguous run of neighbouring work-groups.
SLICES_PER_THREAD = 4

# One-core throughput assumed when estimating a launch's duration (7.4).
_FLOPS_PER_SECOND = 2e10
_BYTES_PER_SECOND = 1e10
_DEFAULT_SPLIT_MICROSECONDS = 200.0
_DEFAULT_SPIN_MICROSECONDS = 100.0

# Estimated one-core time up to which a launch may run on the submitting thread (below).
INLINE_SECONDS = 2e-3

# The event of every inline launch that was not profiled: complete, stateless, so shared.
DONE = CompletedEvent()

# How long close() waits for queued work at interpreter exit before giving up on it.
_EXIT_JOIN_SECONDS = 10.0


def _microseconds(variable: str, default: float) -> float:
    """The environment variable `variable` as seconds, given in microseconds; ValueError
    naming it for anything but a number >= 0."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default * 1e-6
    try:
        microseconds = float(text)
    except ValueError:
        microseconds = -1.0
    if not microseconds >= 0 or microseconds == float("inf"):
        raise ValueError(f"{variable} must be a number of microseconds >= 0, not {text!r}")
    return microseconds * 1e-6


def split_threshold_seconds() -> float:
    """Estimated one-core time below which a launch runs as one call (`TILE_CPU_SPLIT_US`)."""
    return _microseconds("TILE_CPU_SPLIT_US", _DEFAULT_SPLIT_MICROSECONDS)


def spin_seconds() -> float:
    """How long an idle helper spins before it sleeps (`TILE_CPU_SPIN_US`; `hal_llvm.pool`)."""
    return _microseconds("TILE_CPU_SPIN_US", _DEFAULT_SPIN_MICROSECONDS)


def estimated_seconds(flops: int, traffic_bytes: int) -> float:
    """One-core time of a kernel: compute-bound or memory-bound, whichever is slower."""
    return max(flops / _FLOPS_PER_SECOND, traffic_bytes / _BYTES_PER_SECOND)


class LLVMEvent(SettableEvent):
    """Completion of one job of an LLVM device's queue."""

    __slots__ = ()


@dataclass(slots=True)
class _Job:
    action: Callable[[], None] | None
    deps: tuple[Event, ...]
    event: LLVMEvent
    keep_alive: object
    profile: bool


def _run_now(action: Callable[[], None], deps: Sequence[Event], label: str, profile: bool) -> Event:
    """Run an inline job on this thread (its dependencies are complete) and return its event,
    already complete: no event to create, complete and wake, as a queued job needs."""
    failure: BaseException | None = None
    try:
        failure = dependency_failure(deps, label or "a job") if deps else None
        if failure is None:
            if not profile:
                action()
                return CompletedEvent()
            start = time.perf_counter_ns()
            action()
            return CompletedEvent(time.perf_counter_ns() - start)
    except HalError as error:
        failure = error
    except BaseException as error:
        failure = ExecutionError(f"{label or 'a job'} failed: {error!r}")
        failure.__cause__ = error
    return FailedEvent(failure)


class CpuRuntime:
    """The scheduler and compute threads of one LLVM device."""

    def __init__(
        self,
        name: str,
        threads: int,
        split_seconds: float | None = None,
        runner: SliceRunner | None = None,
        pool: Callable[[float], NativePool] | None = None,
    ) -> None:
        """`runner`: gives the native slice loop (`hal_llvm.slices.slice_runner`), which
        runs native entry points' slices without the GIL; without it, slices are claimed
        from Python. `pool`: makes the native pool (`hal_llvm.pool`) in which the helpers
        wait and run native launches without the GIL; without it, they wait in Python."""
        if threads < 1:
            raise ValueError(f"a CPU runtime needs at least one thread, not {threads}")
        self.name = name
        self.threads = threads  # compute threads: the scheduler plus threads - 1 helpers
        self.split_seconds = split_threshold_seconds() if split_seconds is None else split_seconds
        self.runner = runner
        self.spin_seconds = spin_seconds()  # read now: a bad value fails the device's opening
        self._make_pool = pool
        self._closed = False
        self._fresh()
        _live_runtimes.add(self)

    def _fresh(self) -> None:
        """No thread, job or lock taken yet: at the start, and in the child of a fork, where
        none of the parent's threads exist and its locks and queues may be in any state (the
        threads start again on the first job)."""
        self._pool: NativePool | None = None
        self._state_lock = threading.Lock()
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._helper_work: SimpleQueue[SplitLaunch | None] = SimpleQueue()
        self._scheduler: threading.Thread | None = None
        self._helpers: list[threading.Thread] = []
        self._placement = HelperPlacement(())  # the helpers' cores (`hal_llvm.placement`)
        self._pending = 0  # jobs queued or running (under _state_lock)
        self._running = threading.Lock()  # held while a job runs, on any thread

    # ---- submission -----------------------------------------------------------------

    def submit(
        self,
        action: Callable[[], None],
        deps: Sequence[Event] = (),
        *,
        label: str = "",
        keep_alive: object = None,
        profile: bool = False,
        inline: bool = False,
    ) -> Event:
        """Queue `action` to run on the scheduler once `deps` complete; never blocks, except
        that with `inline` a job whose dependencies are complete, submitted to an idle queue,
        runs at once on this thread and its event is returned complete (module docstring).

        `keep_alive` is held until just before the event completes. An exception from
        `action` fails the event (wrapped in ExecutionError unless it is a HalError).
        """
        ready = inline and all(dep.is_complete for dep in deps)
        with self._state_lock:
            if self._closed:
                raise HalError(f"{self.name} is closed")
            self._pending += 1
            if self._scheduler is None:
                self._start()  # the helpers take part in inline launches too
            if not (ready and self._pending == 1):
                event = LLVMEvent(label)
                self._jobs.put(_Job(action, tuple(deps), event, keep_alive, profile))
                return event
        try:
            with self._running:
                return _run_now(action, deps, label, profile)
        finally:
            self._finished()

    def launch_now(
        self,
        entry: GridEntry,
        array: ctypes.Array[ctypes.c_void_p],
        addresses: Sequence[int],
        args: tuple[ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64],
        *,
        split: bool,
        label: str,
        profile: bool,
    ) -> Event | None:
        """Run a short grid launch with no dependencies at once on this thread and return its
        completed event, if the queue is idle; None (nothing done) if it is not, and the
        launch must be queued (`launch`). `submit(inline=True)` without the job around it:
        what a cached call's kernel takes. The buffer `addresses` are written into `array`
        (the parameter array) only once this launch has the queue to itself, so a kernel
        keeps one array for all its launches that run here; `args` are `entry`'s arguments
        (the array's address, 0 and the work-group count), made once as ctypes values,
        which a call converts faster than ints. Locks are taken without `with`: on every
        cached call, that is a third of their cost."""
        state_lock = self._state_lock
        state_lock.acquire()
        try:
            if self._closed:
                raise HalError(f"{self.name} is closed")
            if self._pending:
                return None
            if self._scheduler is None:
                self._start()  # the helpers take part in inline launches too
            self._pending = 1
        finally:
            state_lock.release()
        running = self._running
        running.acquire()
        try:
            array[: len(addresses)] = addresses
            start = time.perf_counter_ns() if profile else 0
            try:
                if split:  # run_grid runs one call when the split does not pay
                    self.run_grid(entry, args[0].value or 0, args[2].value, split=True)
                else:
                    entry(*args)
            except HalError as error:
                return FailedEvent(error)
            except BaseException as error:
                failure = ExecutionError(f"{label or 'a job'} failed: {error!r}")
                failure.__cause__ = error
                return FailedEvent(failure)
            return CompletedEvent(time.perf_counter_ns() - start) if profile else DONE
        finally:
            running.release()
            state_lock.acquire()
            self._pending -= 1
            state_lock.release()

    def launch(
        self,
        entry: GridEntry,
        params: int,
        groups: int,
        deps: Sequence[Event] = (),
        *,
        split: bool = True,
        label: str = "",
        keep_alive: object = None,
        profile: bool = False,
        inline: bool = False,
    ) -> Event:
        """Queue a grid launch: `entry(params, begin, end)` over work-groups [0, groups),
        split across the compute threads when `split` is True and the grid has more than
        one work-group; with `inline`, it may run on this thread (`submit`)."""

        def run_grid() -> None:
            self.run_grid(entry, params, groups, split=split)

        return self.submit(
            run_grid,
            deps,
            label=label,
            keep_alive=keep_alive,
            profile=profile,
            inline=inline,
        )

    def may_inline(self, flops: int, traffic_bytes: int) -> bool:
        """Whether a launch is short enough to run on the submitting thread (module docstring)."""
        return estimated_seconds(flops, traffic_bytes) < INLINE_SECONDS

    def should_split(self, groups: int, flops: int, traffic_bytes: int) -> bool:
        """Whether a launch is worth the fork-join of splitting it (7.4)."""
        if groups <= 1 or self.threads <= 1:
            return False
        return estimated_seconds(flops, traffic_bytes) >= self.split_seconds

    # ---- execution (scheduler thread) ----------------------------------------------------

    def run_grid(self, entry: GridEntry, params: int, groups: int, *, split: bool) -> None:
        """Run work-groups [0, groups) now, on the calling thread plus the helpers."""
        if groups <= 0:
            return
        if not split or groups == 1 or self.threads == 1:
            entry(params, 0, groups)
            return
        slices = min(groups, SLICES_PER_THREAD * self.threads)
        self._placement.before_launch()
        pool = self._pool
        if pool is not None and self.runner is not None:
            address = native_address(entry)
            if address is not None:
                pool.launch(address, params, groups, slices)
                return
        launch = SplitLaunch(entry, params, groups, slices, self.runner)
        for _ in range(min(self.threads - 1, slices - 1)):
            self._helper_work.put(launch)
        if pool is not None:
            pool.post_python()
        launch.participate()
        launch.done.acquire()
        if launch.error is not None:
            raise launch.error

    def _execute(self, job: _Job) -> None:
        event = job.event
        failure: BaseException | None = None
        duration: int | None = None
        try:
            failure = dependency_failure(job.deps, event.label or "a job")
            if failure is None:
                start = time.perf_counter_ns()
                assert job.action is not None
                job.action()
                if job.profile:
                    duration = time.perf_counter_ns() - start
        except HalError as error:
            failure = error
        except BaseException as error:
            failure = ExecutionError(f"{event.label or 'a job'} failed: {error!r}")
            failure.__cause__ = error
        # Release buffers before completing: whoever sees the event complete may free them.
        job.action = job.keep_alive = None
        job.deps = ()
        if failure is None:
            event.set_result(duration)
        else:
            event.set_exception(failure)

    def _finished(self) -> None:
        with self._state_lock:
            self._pending -= 1

    def _schedule(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None:
                break
            with self._running:
                self._execute(job)
            self._finished()
            del job  # drop the finished job's references while waiting for the next
        if self._pool is not None:
            # Posts are made one at a time: a launch running inline on another thread
            # finishes first (its slices would otherwise never all be claimed).
            with self._running:
                self._pool.stop()
            return
        for _ in self._helpers:
            self._helper_work.put(None)

    def _help(self) -> None:
        work = self._helper_work
        pool = self._pool
        if pool is None:
            while True:
                launch = work.get()
                if launch is None:
                    return
                launch.participate()
                del launch
        seen = pool.bell()
        while True:
            python, seen = pool.work(seen)  # runs native launches until one from Python
            if not python:
                return
            while True:  # every Python launch queued; one already finished takes no slice
                try:
                    launch = work.get_nowait()
                except Empty:
                    break
                assert launch is not None
                launch.participate()
                del launch

    # ---- thread lifetime ----------------------------------------------------------------

    def _start(self) -> None:
        # Called with _state_lock held. Threads are daemons so that an idle device never
        # keeps the interpreter alive; close() at exit lets queued work finish first.
        if self._make_pool is not None and self.threads > 1:
            self._pool = self._make_pool(self.spin_seconds)
        self._scheduler = threading.Thread(
            target=self._schedule, name=f"{self.name} scheduler", daemon=True
        )
        self._helpers = [
            threading.Thread(target=self._help, name=f"{self.name} worker {number}", daemon=True)
            for number in range(1, self.threads)
        ]
        self._scheduler.start()
        for helper in self._helpers:
            helper.start()
        self._placement = HelperPlacement([h.native_id for h in self._helpers if h.native_id])

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = None) -> None:
        """Let queued jobs finish, then stop the threads; later submissions raise HalError.
        With a `timeout`, stop waiting for the threads after that many seconds."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            scheduler, helpers = self._scheduler, self._helpers
            if scheduler is None:
                return
            # The scheduler stops the helpers once it reaches this, after the queued jobs.
            self._jobs.put(None)
        if scheduler is threading.current_thread():
            return  # closed from inside a job or callback: the loop ends by itself
        scheduler.join(timeout)
        for helper in helpers:
            helper.join(timeout)

    def _settle_before_fork(self, timeout: float) -> None:
        """Wait up to `timeout` s for no job queued or running: a fork's child then inherits
        no job half done and no lock held by a compute thread."""
        if self._scheduler is None or self._scheduler is threading.current_thread():
            return
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            time.sleep(1e-4)


_live_runtimes: weakref.WeakSet[CpuRuntime] = weakref.WeakSet()

_FORK_SETTLE_SECONDS = 10.0  # how long a fork waits for the devices' queued work


@atexit.register
def _close_all_at_exit() -> None:
    for runtime in list(_live_runtimes):
        runtime.close(_EXIT_JOIN_SECONDS)


def _before_fork() -> None:
    for runtime in list(_live_runtimes):
        runtime._settle_before_fork(_FORK_SETTLE_SECONDS)


def _after_fork_in_child() -> None:
    for runtime in list(_live_runtimes):
        runtime._fresh()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)

"""Running a child process with a deadline, and never leaving any of its descendants behind."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

OUTPUT_CAP = 1 << 20  # bytes kept per stream: the tail, where the verdict line is
KILL_GRACE_SECONDS = 2.0
DRAIN_SECONDS = 5.0


@dataclass(frozen=True)
class ProcessResult:
    returncode: int | None  # None when it was killed at the deadline
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """A short, secret-free description of how the process ended."""
        if self.timed_out:
            return "timed out"
        if self.returncode is not None and self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        return f"exit code {self.returncode}"


class _Tail:
    """The last `cap` bytes of a stream; an agent that logs gigabytes must not fill memory."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.data += chunk
            if len(self.data) > 2 * self.cap:
                del self.data[: len(self.data) - self.cap]

    def text(self) -> str:
        return bytes(self.data[-self.cap :]).decode("utf-8", errors="replace")


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    timeout: float,
    output_cap: int = OUTPUT_CAP,
) -> ProcessResult:
    """Run `argv` in its own process group; at the deadline (or on cancellation) kill the group.

    Raises OSError (e.g. FileNotFoundError) when the program cannot be started.
    """
    proc = await _start(argv, cwd=str(cwd), env=dict(env))
    out, err = _Tail(output_cap), _Tail(output_cap)
    readers = [
        asyncio.create_task(out.drain(proc.stdout)),  # type: ignore[arg-type]
        asyncio.create_task(err.drain(proc.stderr)),  # type: ignore[arg-type]
    ]
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
    finally:
        await _end_group(proc)
        # Descendants are dead, so the pipes close; a daemon that escaped the group could still
        # hold them open, hence the bounded drain.
        done, pending = await asyncio.wait(readers, timeout=DRAIN_SECONDS)
        for task in pending:
            task.cancel()
        if isinstance(proc, _Child):
            proc.close_pipes()
    return ProcessResult(
        returncode=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
    )


async def _start(
    argv: Sequence[str], *, cwd: str, env: dict[str, str]
) -> _Child | asyncio.subprocess.Process:
    """The child, started on a worker thread where the kernel tells its end through a pidfd
    (`_Child`), else by asyncio on the loop."""
    if _pidfd_works():
        return await _Child.start(argv, cwd=cwd, env=env)
    return await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group, so a timeout reaches its children too
    )


class _Child:
    """A child process whose fork and exec never hold the event loop: it is started on a
    worker thread, and the loop learns that it ended from a pidfd. What `run_process` and
    `_end_group` use of `asyncio.subprocess.Process`: `pid`, `returncode`, `stdout`,
    `stderr`, `wait()`.

    asyncio starts a child on the loop's own thread, and the loop then waits while the kernel
    forks and execs it (subprocess's vfork waits for the exec): about a millisecond a child, a
    twentieth of the bot's loop at scale, where a fix runs a dozen git processes
    (`bench/child_spawn.py`, BENCHMARKS.md). On the worker thread that wait holds nothing:
    subprocess releases the GIL while the vforked child execs. Nothing else reaps the child:
    asyncio's child watchers wait only for the children asyncio started.
    """

    def __init__(self, popen: subprocess.Popen, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = popen.pid
        self.returncode: int | None = None
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self._popen = popen
        self._loop = loop
        self._ended: asyncio.Future[None] = loop.create_future()
        self._pipes: list[asyncio.BaseTransport] = []
        # Readable once the child has ended, reaped or not; only `_reap` reaps it.
        self._pidfd = os.pidfd_open(popen.pid)
        loop.add_reader(self._pidfd, self._reap)

    @classmethod
    async def start(cls, argv: Sequence[str], *, cwd: str, env: dict[str, str]) -> _Child:
        loop = asyncio.get_running_loop()
        spawning = loop.run_in_executor(None, functools.partial(
            subprocess.Popen, list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout reaches its children too
        ))
        try:
            popen = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            # Cancelled while the thread starts it: once started, it is killed and reaped there.
            spawning.add_done_callback(lambda done: _abandon(done, loop))
            raise
        try:
            child = cls(popen, loop)
        except BaseException:
            _abandon(spawning, loop)
            raise
        try:
            for reader, pipe in ((child.stdout, popen.stdout), (child.stderr, popen.stderr)):
                transport, _ = await loop.connect_read_pipe(
                    functools.partial(asyncio.StreamReaderProtocol, reader), pipe)
                child._pipes.append(transport)
        except BaseException:
            _signal_group(child.pid, signal.SIGKILL)  # the child reaps itself through its pidfd
            child.close_pipes()
            raise
        return child

    def _reap(self) -> None:
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self.returncode = self._popen.wait()  # it has ended: this returns at once
        self._ended.set_result(None)

    async def wait(self) -> int:
        await asyncio.shield(self._ended)  # a caller's timeout must not cancel the one future
        assert self.returncode is not None
        return self.returncode

    def close_pipes(self) -> None:
        """Stop reading the child's output (a daemon that escaped the group may hold it open)."""
        for transport in self._pipes:
            transport.close()
        for pipe in (self._popen.stdout, self._popen.stderr):
            if pipe is not None:
                pipe.close()


def _abandon(spawning: asyncio.Future, loop: asyncio.AbstractEventLoop) -> None:
    """A child started for a run that is gone: kill its group, reap it on a thread."""
    if spawning.cancelled() or spawning.exception() is not None:
        return
    popen: subprocess.Popen = spawning.result()
    _signal_group(popen.pid, signal.SIGKILL)
    for pipe in (popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
    loop.run_in_executor(None, popen.wait)


async def _end_group(proc: _Child | asyncio.subprocess.Process) -> None:
    """SIGTERM the group if the leader still runs, then SIGKILL whatever is left of it.

    The group is killed even after a clean exit: a background process the fixer left behind
    would otherwise keep running against a workspace that is about to be deleted.
    """
    if proc.returncode is None:
        _signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), KILL_GRACE_SECONDS)
    _signal_group(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        await proc.wait()


@functools.cache
def _pidfd_works() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)

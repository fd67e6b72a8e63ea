"""Running a child process with a deadline, and never leaving any of its descendants behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
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
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group, so a timeout reaches its children too
    )
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
    return ProcessResult(
        returncode=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
    )


async def _end_group(proc: asyncio.subprocess.Process) -> None:
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


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)

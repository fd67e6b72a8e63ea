"""The `command` fixer's sandbox: bubblewrap, so the agent cannot reach the bot's secrets.

An agent works on a PR's code and is steered by review text, neither of which the bot trusts,
so it may run anything. Inside the sandbox it sees the machine read-only and its clone
read-write, and none of: the bot's process (a PID namespace of its own and a fresh /proc, so no
`/proc/<bot pid>/environ`), the bot's environment (only the token-free one built for it), the
bot's secret files (each hidden), other workspaces and the machine's /tmp (private ones). It
holds no capability even where the bot runs as root, so it cannot unmount what hides them. The
network is shared: agents call their model's API.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.logs import get_logger

log = get_logger(__name__)

SANDBOX_MODES = ("auto", "bwrap", "off")
# The bot user's usual credential stores, hidden besides the files the config names.
ALWAYS_HIDDEN = (
    "~/.ssh", "~/.gnupg", "~/.git-credentials", "~/.netrc", "~/.pgpass", "~/.config/gh",
    "~/.docker", "~/.aws",
)
# Replaced by empty ones: scratch space of other processes, and /run's sockets (a Docker socket
# is root on the host).
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/run")
# Files the agent needs whose real place may be in a private directory: /etc/resolv.conf is a
# link into /run on many hosts (systemd-resolved, resolvconf, NetworkManager).
KEPT = ("/etc/resolv.conf",)
ISOLATION = (
    "--unshare-all", "--share-net", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
)
# The machine read-only, a fresh /dev, and a /proc of the sandbox's own PID namespace.
BASE_MOUNTS = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
PROBE_TIMEOUT_SECONDS = 10.0
UNSANDBOXED_RISK = ("the agent can read the bot's environment (its GitHub token), its config "
                    "and secret files, and signal its process")


class SandboxUnavailable(ValueError):
    """`sandbox = "bwrap"` was asked for and bubblewrap cannot run here."""


@dataclass(frozen=True)
class Sandbox:
    program: str  # the bwrap executable
    hide: tuple[Path, ...] = ()
    write: tuple[Path, ...] = ()

    def wrap(self, argv: Sequence[str], *, repo: Path, inputs: Sequence[Path], workdir: Path,
             outputs: Sequence[Path] = ()) -> list[str]:
        """`argv` run inside the sandbox in `repo` (read-write), with `inputs` readable and the
        directories `outputs` writable.

        `workdir` holds every workspace: it is made private, so a run sees no other PR's clone.
        The environment is the one the bwrap process is given, which must be token-free.
        Existing absolute paths in `argv` (the agent's program, its script) stay readable even
        where a private directory covers them.
        """
        repo, workdir = repo.absolute(), workdir.absolute()
        private = [d for d in dict.fromkeys((*PRIVATE_DIRS, str(workdir))) if d != "/"]
        mounts = list(BASE_MOUNTS)
        for path in private:
            mounts += ["--tmpfs", path]
        kept = [os.path.realpath(path) for path in KEPT]
        for item in dict.fromkeys((*kept, *argv)):
            if os.path.isabs(item) and os.path.exists(item) and _within(item, private):
                mounts += ["--ro-bind", item, item]
        if argv and os.path.isabs(argv[0]):
            # The program's whole install (its node_modules, its virtualenv), not its file alone:
            # an agent CLI unpacked under /tmp would otherwise start and find none of its code.
            for root in dict.fromkeys((install_root(argv[0]), install_root(os.path.realpath(argv[0])))):
                if _within(root, private) and root not in private:
                    mounts += ["--ro-bind", root, root]
        for path in map(os.path.realpath, self.write):
            mounts += ["--bind-try", path, path]
        # After the binds above, so a secret inside a readable or writable path stays hidden.
        for path in _existing(self.hide):
            mounts += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", os.devnull, path]
        mounts += ["--bind", str(repo), str(repo)]
        for writable in outputs:
            mounts += ["--bind", str(writable.absolute()), str(writable.absolute())]
        for readable in inputs:
            mounts += ["--ro-bind", str(readable.absolute()), str(readable.absolute())]
        return [self.program, *ISOLATION, *mounts, "--setenv", "TMPDIR", "/tmp",
                "--chdir", str(repo), "--", *argv]


def sandbox_for(mode: str, *, hide: Iterable[str | Path] = (), write: Iterable[str | Path] = (),
                create: bool = True, quiet: bool = False) -> Sandbox | None:
    """The sandbox `fixer.sandbox = mode` asks for; None to run unsandboxed, said loudly.

    Raises SandboxUnavailable when `bwrap` is asked for and cannot run.
    """
    if mode not in SANDBOX_MODES:
        raise ValueError(f"fixer sandbox must be one of {', '.join(SANDBOX_MODES)}, not {mode!r}")
    if mode == "off":
        if not quiet:
            log.warning("fixer.unsandboxed", reason='fixer.sandbox = "off"', risk=UNSANDBOXED_RISK)
        return None
    program = shutil.which("bwrap")
    why = probe(program) if program else "bwrap is not installed (Debian package bubblewrap)"
    if why is not None:
        if mode == "bwrap":
            raise SandboxUnavailable(f'fixer.sandbox = "bwrap": {why}')
        if not quiet:
            log.warning("fixer.unsandboxed", reason=why, risk=UNSANDBOXED_RISK,
                        hint='install bubblewrap, or set fixer.sandbox = "off" to say this is meant')
        return None
    assert program is not None  # else `why` said bwrap is not installed
    made = ensure_writable(write) if create else []
    if made:
        log.info("fixer.sandbox_write_created", paths=[str(p) for p in made])
    if not quiet:
        log.info("fixer.sandboxed", program=program)
    return Sandbox(program, hide=_paths((*ALWAYS_HIDDEN, *hide)), write=_paths(write))


@functools.cache
def probe(program: str) -> str | None:
    """Why bubblewrap cannot run here, or None when it can (a container may forbid namespaces)."""
    argv = [program, *ISOLATION, *BASE_MOUNTS, "--", "true"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_SECONDS, env={"PATH": os.defpath})
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{program} could not run: {type(e).__name__}"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return f"{program} cannot make a sandbox here: " + (lines[-1][:200] if lines else f"exit code {done.returncode}")


def install_root(program: str) -> str:
    """The directory an installed program needs whole: above its `node_modules` (an npm
    install), its virtualenv (the folder with `pyvenv.cfg`), else its own folder."""
    parts = Path(program).parts
    if "node_modules" in parts:
        return str(Path(*parts[:parts.index("node_modules")]))
    for parent in Path(program).parents:
        if (parent / "pyvenv.cfg").is_file():
            return str(parent)
    return str(Path(program).parent)


def ensure_writable(paths: Iterable[str | Path]) -> list[Path]:
    """Create each missing path the sandbox is to let the agent write, as a directory only the
    bot's user can read: bubblewrap binds only what exists, and an agent whose state directory
    was skipped fails at its first write. Returns the paths it created."""
    made = []
    for path in _paths(paths):
        if not os.path.lexists(path):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            made.append(path)
    return made


def _paths(paths: Iterable[str | Path]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(Path(p).expanduser().absolute() for p in paths))


def _within(path: str, dirs: Iterable[str]) -> bool:
    return any(os.path.commonpath((path, d)) == d for d in dirs)


def _existing(paths: Iterable[Path]) -> list[str]:
    """Each path that exists, symlinks resolved: the mount must cover the file itself."""
    return list(dict.fromkeys(os.path.realpath(p) for p in paths if os.path.exists(p)))

"""The clone's git directory after the fixer ran: taken back before the bot's git reads it.

The fixer could write anything in `.git`. The bot's later git commands in the clone read
`.git/config` (fsmonitor, filter drivers, `include.path`, credential helpers, URL rewrites),
`commondir` (a config elsewhere), `info/attributes`, `hooks/` and `objects/info/alternates`
(objects from outside the clone). So `.git` must still be a real directory, its config is
replaced by the bytes the bot saved before the fixer started, and the rest is removed.
Everything here works relative to an open directory and never follows a link.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from bot.fixers.git import GitError

# Files git reads from a repository's own directory that can run a program or point it
# elsewhere; the bot's fresh clone has none of them.
PLANTED = (
    ("commondir",),
    ("config.worktree",),
    ("info", "attributes"),
    ("objects", "info", "alternates"),
    ("objects", "info", "http-alternates"),
    ("hooks",),
)
# Passed to every git command the bot runs after the fixer, in case a file above is missed:
# no hook, no fsmonitor program, no signing program, no credential helper, no submodule walk.
SAFE_CONFIG = (
    "-c", f"core.hooksPath={os.devnull}", "-c", "core.fsmonitor=false",
    "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "credential.helper=",
    "-c", "core.untrackedCache=false", "-c", "submodule.recurse=false",
    "-c", "diff.ignoreSubmodules=all",
)

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def saved_config(repo: Path) -> bytes:
    """The clone's config as the bot wrote it; read before the fixer starts."""
    return (repo / ".git" / "config").read_bytes()


def reclaim(repo: Path, config: bytes) -> None:
    """Restore `repo/.git` to what git may safely read; GitError when that cannot be done."""
    try:
        fd = os.open(repo / ".git", _DIR)
    except OSError:
        raise GitError(
            "refusing to commit: the fixer replaced the clone's .git directory "
            "(it is a file or a link now)"
        ) from None
    try:
        for parts in (*PLANTED, ("config",)):
            _remove(fd, parts)
        # O_EXCL with O_NOFOLLOW: a link planted between the unlink and here is not written through.
        out = os.open("config", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o644, dir_fd=fd)
        with os.fdopen(out, "wb") as f:
            f.write(config)
    except OSError as e:
        raise GitError(
            f"refusing to commit: could not restore the clone's git directory ({type(e).__name__})"
        ) from None
    finally:
        os.close(fd)


def copy_regular_file(source: Path, target: Path) -> None:
    """Copy `source`, which must be a regular file and not a link, to a new file `target`."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise GitError(f"the bundle of the fixer's commits is missing or a link ({type(e).__name__})") from None
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            raise GitError("the bundle of the fixer's commits is not a regular file")
        with open(target, "xb") as dst:
            shutil.copyfileobj(src, dst)


def _remove(dir_fd: int, parts: tuple[str, ...]) -> None:
    """Remove `parts` under `dir_fd`; a link or file where a directory should be goes too."""
    name, rest = parts[0], parts[1:]
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        os.unlink(name, dir_fd=dir_fd)
    elif not rest:
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        sub = os.open(name, _DIR, dir_fd=dir_fd)
        try:
            _remove(sub, rest)
        finally:
            os.close(sub)


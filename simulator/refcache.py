"""Every ref of a bare repository, cached, and checked against the disk before each use.

A ref can move without the simulator being told: a real `git push` updates the ref before its
post-receive hook reports it, and the report can be lost (hook failed, no simulator serving the
root). So a cached snapshot is only used while a *stamp* of the ref storage still matches the
one taken before the snapshot was read: the `packed-refs` file and every loose ref file under
`refs/`, each by (path, inode, mtime, ctime, size). Git moves a loose ref by renaming a new lock
file over it, so every move gives the ref file a new inode (and new times), every new or
deleted branch adds or removes a file, and every rewrite of `packed-refs` replaces that file.
Taking the stamp costs a few `stat` calls and no subprocess; a changed stamp costs one
`git for-each-ref`.

On top of that, every move the simulator makes or hears of (`GitStore.update_ref`, the
post-receive hook) drops the snapshot outright (`invalidate`), so those never depend on the
stamp at all. A repository whose refs cannot be stamped (a reftable, a symlinked ref, a file
vanishing mid-walk) is read from git every time.

What the stamp cannot see: a ref moved twice, unreported, between two reads, ending on the inode
it had before with the same timestamps (two real pushes within one filesystem clock tick), or a
tool other than git rewriting a ref file in place within the tick it was written. Neither is a
way anything in this project moves refs.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

# (objectname, objecttype, peeled objectname, peeled objecttype) of one ref; the peeled fields
# are empty unless the ref points at an annotated tag.
RefEntry = tuple[str, str, str, str]
Stamp = tuple

FOR_EACH_REF_FORMAT = ("--format=%(refname) %(objectname) %(objecttype) %(*objectname) "
                       "%(*objecttype)")

# git's rules for expanding a name that `rev-parse` reads as a ref (refs.c ref_rev_parse_rules):
# the first one naming an existing ref wins.
_REV_PARSE_RULES = ("{}", "refs/{}", "refs/tags/{}", "refs/heads/{}", "refs/remotes/{}",
                    "refs/remotes/{}/HEAD")
# A name `rev-parse` can only read as a ref name: nothing it would parse as revision syntax
# (~ ^ : @{ ..) and nothing check-ref-format refuses. Anything else is left to git itself.
_PLAIN = re.compile(r"[A-Za-z0-9_+=,-][A-Za-z0-9_./+=,-]*")
HEX40 = re.compile(r"[0-9a-f]{40}")


class _Unknown:
    """The cache cannot answer exactly (e.g. a tag of a tag): ask git."""


UNKNOWN = _Unknown()


def plain_refname(name: str) -> bool:
    return (bool(_PLAIN.fullmatch(name)) and ".." not in name and "//" not in name
            and "/." not in name and ".lock/" not in name
            and not name.endswith(("/", ".", ".lock")))


def parse_refs(out: str) -> dict[str, RefEntry]:
    refs = {}
    for line in out.splitlines():
        if line:
            name, sha, kind, peeled, peeled_kind = line.split(" ", 4)
            refs[name] = (sha, kind, peeled, peeled_kind)
    return refs


def peel_commit(entry: RefEntry) -> str | None | _Unknown:
    """What `rev-parse --verify REF^{commit}` answers for a ref pointing at `entry`."""
    sha, kind, peeled, peeled_kind = entry
    if kind == "commit":
        return sha
    if kind in ("tree", "blob"):
        return None
    if kind == "tag" and peeled_kind == "commit":
        return peeled
    if kind == "tag" and peeled_kind in ("tree", "blob"):
        return None
    return UNKNOWN  # a tag of a tag: let git peel it


def ref_stamp(git_dir: Path) -> Stamp | None:
    """The stamp of every ref file of a files-backend repository, or None if it cannot be taken."""
    if (git_dir / "reftable").exists():
        return None
    try:
        st = os.stat(git_dir / "packed-refs")
        packed: tuple = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    except FileNotFoundError:
        packed = ()
    except OSError:
        return None
    files = []
    pending = [str(git_dir / "refs")]
    try:
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        return None  # an old-style symlinked ref: its target is not stamped
                    if entry.is_dir():
                        pending.append(entry.path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    files.append((entry.path, st.st_ino, st.st_mtime_ns, st.st_ctime_ns,
                                  st.st_size))
    except OSError:  # a ref or directory removed while we walked: the refs are moving
        return None
    files.sort()
    return packed, tuple(files)


@dataclass
class RefSnapshot:
    stamp: Stamp | None
    refs: dict[str, RefEntry]
    heads: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.heads = {name.removeprefix("refs/heads/"): entry[0]
                      for name, entry in self.refs.items() if name.startswith("refs/heads/")}

    def peel(self, name: str) -> str | None | _Unknown:
        """`rev-parse --verify NAME^{commit}` for a plain `name` under refs/ (see plain_refname)."""
        for rule in _REV_PARSE_RULES:
            entry = self.refs.get(rule.format(name))
            if entry is not None:
                return peel_commit(entry)
        return None


class RefCache:
    """One validated snapshot per repository (see the module docstring)."""

    def __init__(self) -> None:
        self._snapshots: dict[str, RefSnapshot] = {}
        self._generations: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.hits = 0
        self.misses = 0

    def invalidate(self, git_dir: Path) -> None:
        key = str(git_dir)
        self._generations[key] = self._generations.get(key, 0) + 1
        self._snapshots.pop(key, None)

    def clear(self) -> None:
        for key in list(self._snapshots):
            self.invalidate(Path(key))

    def _valid(self, key: str, stamp: Stamp | None) -> RefSnapshot | None:
        snapshot = self._snapshots.get(key)
        if stamp is not None and snapshot is not None and snapshot.stamp == stamp:
            return snapshot
        return None

    async def snapshot(self, git_dir: Path,
                       load: Callable[[], Awaitable[dict[str, RefEntry]]]) -> RefSnapshot:
        key = str(git_dir)
        found = self._valid(key, ref_stamp(git_dir))
        if found is not None:
            self.hits += 1
            return found
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one reader refreshes; the others wait for it and then re-check
            # The stamp is taken before git reads the refs: a move after it changes the stamp,
            # so a snapshot is never kept under a stamp older than what it read.
            stamp = ref_stamp(git_dir)
            found = self._valid(key, stamp)
            if found is not None:
                self.hits += 1
                return found
            self.misses += 1
            generation = self._generations.get(key, 0)
            snapshot = RefSnapshot(stamp, await load())
            if stamp is not None and self._generations.get(key, 0) == generation:
                self._snapshots[key] = snapshot  # not if a move was reported while git read
            return snapshot

"""Real bare git repositories: the only place branch heads live.

Every call is an asyncio subprocess with a timeout, so a slow disk never wedges the event loop
that also serves the HTTP API (a `git push` from a test waits on our post-receive endpoint).

Ref reads (`heads`, `branch_sha`, `resolve`) are served from a snapshot of the repository's refs
that is re-checked against the ref files on disk before every use (refcache.py), and dropped by
every ref move the simulator makes (`update_ref`) or hears of (`invalidate`, from the
post-receive hook). `cache_heads=False` reads git every time. `calls` counts git subprocesses by
subcommand.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import stat
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .refcache import FOR_EACH_REF_FORMAT, HEX40, UNKNOWN, RefCache, parse_refs, plain_refname

ZERO_SHA = "0" * 40
_BLOBS_CAP = 4096  # files read at a full sha, kept; cleared whole when full

# A machine without any git config must still be able to commit, and a developer's global
# config (hooks, signing, templates) must not leak into the simulator's repositories.
_BASE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}

# A bash script speaking HTTP/1.0 over bash's /dev/tcp: every push runs it, as a child of the
# pusher's git, so its CPU is the pusher's. In Python it cost ~23 ms of CPU a push even started
# with `-IS` (~50 ms importing urllib.request with the site packages), about as much as the rest
# of a small push; bash starts in ~2 ms. It waits for the simulator's answer, so a push returns
# once the simulator has seen it. The values are set in single quotes (`shlex.quote`).
_HOOK = r"""#!/bin/bash
# Installed by the convergebot GitHub simulator: a real `git push` tells the simulator which refs
# moved, so it can send `push` and `pull_request` `synchronize` webhooks.
export LC_ALL=C
url_file={url_file}
repo={repo}
fail() {{ printf 'simulator post-receive hook: %s\n' "$1" >&2; exit 0; }}
json() {{ J=${{1//\\/\\\\}}; J=${{J//\"/\\\"}}; }}  # a JSON string's inside, in J
[ -r "$url_file" ] || exit 0  # no simulator is serving this root right now
url=$(<"$url_file")
updates=
while read -r old new ref; do
    [ -n "$ref" ] || continue
    json "$ref"
    updates+="${{updates:+,}}{{\"old\":\"$old\",\"new\":\"$new\",\"ref\":\"$J\"}}"
done
json "$repo"; body="{{\"repo\":\"$J\""
json "${{SIMULATOR_PUSHER:-}}"; body+=",\"pusher\":\"$J\",\"updates\":[$updates]}}"
rest=${{url#http://}}
[ "$rest" != "$url" ] || fail "not an http://host:port URL: $url"
netloc=${{rest%%/*}}
path=${{rest#"$netloc"}}; path=${{path:-/}}
host=${{netloc%:*}}; host=${{host#[}}; host=${{host%]}}; port=${{netloc##*:}}
[ -n "$host" ] && [ "$port" != "$netloc" ] || fail "not an http://host:port URL: $url"
{{ exec 3<>"/dev/tcp/$host/$port"; }} 2>/dev/null || fail "cannot connect to $netloc"
printf 'POST %s HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    "$path" "$netloc" "${{#body}}" "$body" >&3
read -r -t 20 proto status _ <&3 || fail "no answer from $netloc"
while read -r -t 20 _ <&3; do :; done  # the rest of the answer, up to the simulator's close
[ "$status" = 200 ] || fail "answered $proto $status"
"""


class GitError(Exception):
    pass


class RefMoved(GitError):
    """The branch moved between reading it and updating it (a concurrent push won)."""


@dataclass(frozen=True)
class Author:
    name: str
    email: str


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    tree: str
    parents: list[str]
    author: Author
    timestamp: str
    message: str


@dataclass(frozen=True)
class FileChange:
    """One file of a diff, named as GitHub's compare names it."""

    path: str
    status: str  # added | removed | modified | changed (its type)
    blob: str  # the file's blob on the new side (on the old side when removed)
    additions: int
    deletions: int


@dataclass(frozen=True)
class Comparison:
    """`head` against `base` (both commits): what GET .../compare/{base}...{head} reports."""

    base: CommitInfo
    merge_base: CommitInfo
    ahead_by: int
    behind_by: int
    commits: list[CommitInfo]  # in head and not in base, oldest first
    files: list[FileChange]  # changed from the merge base to head


_RAW_STATUS = {"A": "added", "D": "removed", "M": "modified", "T": "changed"}
_LOG_FORMAT = "--format=%H%x1f%T%x1f%P%x1f%an%x1f%ae%x1f%aI%x1f%B"
# `_LOG_FORMAT`'s fields between two markers, the commit's files (-z) after the second.
_PUSH_FORMAT = _LOG_FORMAT.replace("--format=", "--format=%x1e", 1) + "%x1d"


def _commit(record: str) -> CommitInfo:
    sha, tree, parents, name, email, when, body = record.split("\x1f", 6)
    return CommitInfo(sha, tree, parents.split(), Author(name, email), when, body.strip())


class GitStore:
    """One bare repository per simulated repo, under `root/owner/name.git`."""

    def __init__(self, root: Path, *, timeout: float = 30.0, cache_heads: bool = True) -> None:
        self.root = root
        self.timeout = timeout
        self.hook_url_file = root / ".post-receive-url"
        self.calls: Counter[str] = Counter()  # git subprocesses run, by subcommand
        self.ref_cache = RefCache()
        self._commits: dict[tuple[str, str], str] = {}  # (repo, 40-hex object) -> its commit
        self._blobs: dict[tuple[str, str, str], tuple[str, bytes]] = {}  # files at a full sha
        self._cache_heads = cache_heads

    @property
    def cache_heads(self) -> bool:
        """Serve ref reads from the validated snapshot (True) or from git every time (False)."""
        return self._cache_heads

    @cache_heads.setter
    def cache_heads(self, on: bool) -> None:
        self._cache_heads = on
        self.ref_cache.clear()
        self._commits.clear()
        self._blobs.clear()

    def invalidate(self, git_dir: Path) -> None:
        """Refs of `git_dir` moved (or may have): the next read goes to git."""
        self.ref_cache.invalidate(git_dir)

    def path(self, full_name: str) -> Path:
        owner, name = full_name.split("/", 1)
        return self.root / owner / f"{name}.git"

    async def _exec(self, git_dir: Path, args: tuple[str, ...], input: bytes | None,
                    env: dict[str, str] | None) -> tuple[int, bytes, bytes]:
        self.calls[args[0]] += 1
        full_env = {**os.environ, **_BASE_ENV, "GIT_DIR": str(git_dir), **(env or {})}
        proc = await asyncio.create_subprocess_exec(
            "git", *args, env=full_env,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), self.timeout)
        except BaseException:  # timeout or cancellation: never leave a git process behind
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None  # communicate() waited for the process
        return proc.returncode, out, err

    async def run(self, git_dir: Path, *args: str, input: bytes | None = None,
                  env: dict[str, str] | None = None, ok_codes: tuple[int, ...] = (0,)) -> str:
        code, out, err = await self._exec(git_dir, args, input, env)
        if code not in ok_codes:
            raise GitError(f"git {' '.join(args)}: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    async def _succeeds(self, git_dir: Path, *args: str) -> bool:
        code, _, _ = await self._exec(git_dir, args, None, None)
        return code == 0

    async def init(self, full_name: str, default_branch: str) -> Path:
        git_dir = self.path(full_name)
        git_dir.mkdir(parents=True, exist_ok=True)
        await self.run(git_dir, "init", "--bare", "--quiet", f"--initial-branch={default_branch}",
                       str(git_dir))
        hook = git_dir / "hooks" / "post-receive"
        hook.write_text(_HOOK.format(url_file=shlex.quote(str(self.hook_url_file)),
                                     repo=shlex.quote(full_name)))
        hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.invalidate(git_dir)
        return git_dir

    async def fork(self, source: Path, full_name: str, default_branch: str) -> Path:
        """A new repository holding `source`'s branches. Each borrows the other's objects
        (alternates), as GitHub's repositories of one fork network share theirs: the base can
        review, diff and merge a fork's commits, and the fork take a merge of the base."""
        git_dir = await self.init(full_name, default_branch)
        (git_dir / "objects" / "info" / "alternates").write_text(f"{source.resolve() / 'objects'}\n")
        with (source / "objects" / "info" / "alternates").open("a") as f:
            f.write(f"{git_dir.resolve() / 'objects'}\n")
        await self.run(git_dir, "fetch", "--quiet", "--no-tags", str(source),
                       "refs/heads/*:refs/heads/*")
        self.invalidate(git_dir)
        return git_dir

    def set_hook_url(self, url: str | None) -> None:
        if url is None:
            self.hook_url_file.unlink(missing_ok=True)
        else:
            self.hook_url_file.write_text(url)

    async def heads(self, git_dir: Path) -> dict[str, str]:
        """Every branch and its tip, read in one call."""
        if self._cache_heads:
            return dict((await self._snapshot(git_dir)).heads)
        out = await self.run(git_dir, "for-each-ref", "--format=%(refname:lstrip=2) %(objectname)",
                             "refs/heads")
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    async def _snapshot(self, git_dir: Path):
        async def load():
            return parse_refs(await self.run(git_dir, "for-each-ref", FOR_EACH_REF_FORMAT))

        return await self.ref_cache.snapshot(git_dir, load)

    async def rev_parse(self, git_dir: Path, rev: str) -> str | None:
        out = await self.run(git_dir, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}",
                             ok_codes=(0, 1))
        return out.strip() or None

    async def branch_sha(self, git_dir: Path, branch: str) -> str | None:
        name = f"refs/heads/{branch}"
        if self._cache_heads and plain_refname(name):
            found = (await self._snapshot(git_dir)).peel(name)
            if found is not UNKNOWN:
                return found
        return await self.rev_parse(git_dir, name)

    async def resolve(self, git_dir: Path, ref: str) -> str | None:
        """A commit sha from a sha, a branch name or `heads/...`, as GitHub's `{ref}` parameters."""
        candidates = (f"refs/heads/{ref}", f"refs/{ref}", ref)
        if self._cache_heads and plain_refname(ref):
            # The two ref candidates from one snapshot; the last (a sha, or anything else git
            # may make of the name) from git, or for a full sha from the commits already seen.
            snapshot = await self._snapshot(git_dir)
            found = snapshot.peel(candidates[0])
            if found is None:
                found = snapshot.peel(candidates[1])
            if found is None:
                if HEX40.fullmatch(ref):
                    return await self._commit_of(git_dir, ref)
                return await self.rev_parse(git_dir, ref)
            if found is not UNKNOWN:
                return found
        for candidate in candidates:
            sha = await self.rev_parse(git_dir, candidate)
            if sha:
                return sha
        return None

    async def _commit_of(self, git_dir: Path, sha: str) -> str | None:
        """The commit a full object name peels to. Objects never change, so a found answer is
        kept; a missing one is asked again (the object may be pushed later)."""
        key = (str(git_dir), sha)
        if key not in self._commits:
            found = await self.rev_parse(git_dir, sha)
            if found is None:
                return None
            self._commits[key] = found
        return self._commits[key]

    async def read_blob(self, git_dir: Path, rev: str, path: str) -> tuple[str, bytes] | None:
        """(blob sha, content) of `path` at `rev`, or None if it is not a file there. One git
        process; a file found at a full commit sha never changes and is kept (a miss is not: the
        commit may be pushed later)."""
        key = (str(git_dir), rev, path)
        if (kept := self._blobs.get(key)) is not None:
            return kept
        spec = f"{rev}:{path}".encode()
        if b"\n" in spec:
            return None  # one object name per line: git could not be asked for this one
        out = await self._bytes(git_dir, "cat-file", "--batch", input=spec + b"\n")
        header, _, rest = out.partition(b"\n")
        sha, _, kind_size = header.decode(errors="replace").partition(" ")
        kind, _, size = kind_size.partition(" ")
        found = (sha, rest[:int(size)]) if kind == "blob" else None
        if found is not None and self._cache_heads and HEX40.fullmatch(rev):
            if len(self._blobs) >= _BLOBS_CAP:
                self._blobs.clear()
            self._blobs[key] = found
        return found

    async def list_dir(self, git_dir: Path, rev: str, path: str) -> list[tuple[str, str, str, int]]:
        """Entries (type, sha, path, size) of a directory at `rev`; empty if there is none."""
        target = f"{rev}:{path}" if path else f"{rev}^{{tree}}"
        out = await self.run(git_dir, "ls-tree", "-l", "-z", target, ok_codes=(0, 128))
        entries = []
        for entry in filter(None, out.split("\0")):
            meta, _, name = entry.partition("\t")
            _mode, kind, sha, size = meta.split()
            full = f"{path.rstrip('/')}/{name}" if path else name
            entries.append(("file" if kind == "blob" else "dir", sha, full,
                            0 if size == "-" else int(size)))
        return entries

    async def _bytes(self, git_dir: Path, *args: str, input: bytes | None = None) -> bytes:
        code, out, err = await self._exec(git_dir, args, input, None)
        if code:
            raise GitError(err.decode(errors="replace").strip())
        return out

    async def commit_files(self, git_dir: Path, branch: str, files: Mapping[str, str | None], *,
                           message: str, author: Author, start: str | None = None) -> tuple[str, str]:
        """Commit `files` (None deletes) on top of `branch` (created from `start` if missing).

        Returns (old sha, new sha); old is ZERO_SHA for a new branch. The ref update is a
        compare-and-set on the old sha, so a concurrent real push is never overwritten.
        """
        old = await self.branch_sha(git_dir, branch)
        parent = old or (await self.resolve(git_dir, start) if start else None)
        with tempfile.TemporaryDirectory(prefix="sim-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if parent:
                await self.run(git_dir, "read-tree", parent, env=env)
            lines = []
            for path, content in files.items():
                if content is None:
                    lines.append(f"0 {ZERO_SHA}\t{path}")
                else:
                    blob = (await self.run(git_dir, "hash-object", "-w", "--stdin",
                                           input=content.encode())).strip()
                    lines.append(f"100644 {blob}\t{path}")
            if lines:
                await self.run(git_dir, "update-index", "--index-info",
                               input=("\n".join(lines) + "\n").encode(), env=env)
            tree = (await self.run(git_dir, "write-tree", env=env)).strip()
        new = await self.commit_tree(git_dir, tree, [parent] if parent else [], message, author)
        await self.update_ref(git_dir, branch, new, old or ZERO_SHA)
        return old or ZERO_SHA, new

    async def commit_tree(self, git_dir: Path, tree: str, parents: list[str], message: str,
                          author: Author) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        env = {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email,
               "GIT_COMMITTER_NAME": author.name, "GIT_COMMITTER_EMAIL": author.email}
        return (await self.run(git_dir, *args, input=message.encode(), env=env)).strip()

    async def update_ref(self, git_dir: Path, branch: str, new: str, old: str) -> None:
        try:
            await self.run(git_dir, "update-ref", f"refs/heads/{branch}", new, old)
        except GitError as e:
            raise RefMoved(str(e)) from e
        finally:  # moved, or refused because someone else moved it: read git next time
            self.invalidate(git_dir)

    async def delete_ref(self, git_dir: Path, branch: str, old: str) -> None:
        """Delete the branch if it still points at `old` (RefMoved otherwise)."""
        try:
            await self.run(git_dir, "update-ref", "-d", f"refs/heads/{branch}", old)
        except GitError as e:
            raise RefMoved(str(e)) from e
        finally:
            self.invalidate(git_dir)

    async def merge_tree(self, git_dir: Path, ours: str, theirs: str) -> str | None:
        """The tree of a three-way merge, or None when the two conflict."""
        code, out, err = await self._exec(
            git_dir, ("merge-tree", "--write-tree", "--no-messages", ours, theirs), None, None)
        if code == 1:
            return None
        if code:
            raise GitError(f"git merge-tree: {err.decode(errors='replace').strip()}")
        return out.decode().splitlines()[0].strip()

    async def tree_of(self, git_dir: Path, commit: str) -> str:
        return (await self.run(git_dir, "rev-parse", f"{commit}^{{tree}}")).strip()

    async def is_ancestor(self, git_dir: Path, ancestor: str, descendant: str) -> bool:
        return await self._succeeds(git_dir, "merge-base", "--is-ancestor", ancestor, descendant)

    async def commits_between(self, git_dir: Path, base: str, head: str) -> list[CommitInfo]:
        """Commits reachable from head and not from base, oldest first."""
        if base == ZERO_SHA:
            spec = [head, "--max-count=20"]
        else:
            spec = [f"{base}..{head}"]
        out = await self.run(git_dir, "log", "--reverse", "-z", _LOG_FORMAT, *spec)
        return [_commit(record) for record in filter(None, out.split("\0"))]

    async def pushed_commits(self, git_dir: Path, base: str, head: str
                             ) -> tuple[list[CommitInfo], dict[str, dict[str, list[str]]]]:
        """The commits `commits_between` lists, and what each changed (`{sha: {"added": [...],
        "removed": [...], "modified": [...]}}`), as a push event lists them: one git call. The
        commits are known to exist from then on (`resolve` asks git no more about them)."""
        spec = [head, "--max-count=20"] if base == ZERO_SHA else [f"{base}..{head}"]
        out = await self.run(git_dir, "-c", "core.quotePath=false", "log", "--reverse", "--no-renames",
                             "--name-status", "-z", _PUSH_FORMAT, *spec)
        commits: list[CommitInfo] = []
        files: dict[str, dict[str, list[str]]] = {}
        for chunk in out.split("\x1e")[1:]:
            header, _, rest = chunk.partition("\x1d")
            info = _commit(header)
            commits.append(info)
            lists = files[info.sha] = {"added": [], "removed": [], "modified": []}
            fields = rest.strip("\0\n").split("\0")
            for code, path in zip(fields[0::2], fields[1::2], strict=False):
                lists[{"A": "added", "D": "removed"}.get(code.strip()[:1], "modified")].append(path)
        if self._cache_heads:
            self._commits.update(((str(git_dir), c.sha), c.sha) for c in commits)
        return commits, files

    async def commit_info(self, git_dir: Path, sha: str) -> CommitInfo:
        out = await self.run(git_dir, "log", "-1", "-z", _LOG_FORMAT, sha)
        return _commit(out.rstrip("\0"))

    async def diff_stats(self, git_dir: Path, base: str, head: str) -> tuple[int, int, int, int]:
        """(commits, additions, deletions, changed files) of head against its merge base."""
        count = await self.run(git_dir, "rev-list", "--count", f"{base}..{head}")
        numstat = await self.run(git_dir, "diff", "--numstat", f"{base}...{head}")
        adds = dels = files = 0
        for line in numstat.splitlines():
            a, d, _ = line.split("\t", 2)
            adds += int(a) if a.isdigit() else 0
            dels += int(d) if d.isdigit() else 0
            files += 1
        return int(count.strip() or 0), adds, dels, files

    async def merge_base(self, git_dir: Path, a: str, b: str) -> str | None:
        """The best common ancestor of two commits, or None when they share no history."""
        return (await self.run(git_dir, "merge-base", a, b, ok_codes=(0, 1))).strip() or None

    async def changed_files(self, git_dir: Path, old: str, new: str) -> list[FileChange]:
        """Files that differ between two commits, by path (renames read as remove + add)."""
        raw = await self.run(git_dir, "diff", "--raw", "-z", "--no-renames", "--no-abbrev",
                             old, new)
        numstat = await self.run(git_dir, "diff", "--numstat", "-z", "--no-renames", old, new)
        counts: dict[str, tuple[int, int]] = {}
        for record in filter(None, numstat.split("\0")):
            added, deleted, path = record.split("\t", 2)
            counts[path] = (int(added) if added.isdigit() else 0, int(deleted) if deleted.isdigit() else 0)
        fields = raw.split("\0")
        files = []
        for meta, path in zip(fields[0::2], fields[1::2], strict=False):
            if not meta.startswith(":"):
                continue
            _old_mode, _new_mode, old_blob, new_blob, code = meta[1:].split()
            status = _RAW_STATUS.get(code[0], "modified")
            adds, dels = counts.get(path, (0, 0))
            files.append(FileChange(path, status, old_blob if status == "removed" else new_blob,
                                    adds, dels))
        return files

    async def compare(self, git_dir: Path, base: str, head: str) -> Comparison | None:
        """`head` against `base` as GitHub's compare reports it; None without a common
        ancestor (GitHub answers 404 then)."""
        merge_base = await self.merge_base(git_dir, base, head)
        if merge_base is None:
            return None
        counts = await self.run(git_dir, "rev-list", "--left-right", "--count", f"{base}...{head}")
        behind, ahead = (int(n) for n in counts.split())
        return Comparison(
            base=await self.commit_info(git_dir, base),
            merge_base=await self.commit_info(git_dir, merge_base),
            ahead_by=ahead, behind_by=behind,
            commits=await self.commits_between(git_dir, base, head),
            files=await self.changed_files(git_dir, merge_base, head))

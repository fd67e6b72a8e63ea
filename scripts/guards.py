#!/usr/bin/env python3
"""The guard catalogue, executable: each guard is broken on purpose and its named tests must fail.

The catalogue is data: `tests/guards/*.toml`, each with a `title` and one `[[guard]]` table per guard:
  name       a short title
  race       the race (or failure) the guard prevents, in one sentence
  path       the file that holds the guard
  code       the exact code that is the guard (it must occur exactly once in `path`)
  mutation   what replaces `code` to remove the guard
  tests      the test node ids that must fail under the mutation
  backends   where to run them: ["sqlite"] (default) or ["sqlite", "postgres"] for guards in SQL

Besides guards, a file may hold `[[kept]]` checks (they duplicate a guard), `[[exempt]]` conditions
(they look like guards but are none: `name`, `path`, `code`, `why`) and a `watch` list of modules
whose conditions `--report` reads although they hold no guard yet.

Each mutation is applied to a scratch copy of the working tree (tracked and untracked files, not
the ignored ones), so the tree itself is never touched and uncommitted work is what is tested.

  scripts/guards.py                 every guard, on the backends it names
  scripts/guards.py WORD...         only guards whose name contains one of the words
  scripts/guards.py --check         only check the catalogue against the code (no tests run)
  scripts/guards.py --pick N        a rotating subset of N guards (by the date, or --seed S)
  scripts/guards.py --report        the guard-like conditions no entry lists (scripts/guard_report.py)

Exits non-zero if any mutation survives, or any entry no longer matches the code.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE_DIR = ROOT / "tests" / "guards"
BACKENDS = ("sqlite", "postgres")
FIELDS = {"name", "race", "path", "code", "mutation", "tests", "backends"}
KEPT_FIELDS = {"name", "path", "code", "why", "covered_by"}
EXEMPT_FIELDS = {"name", "path", "code", "why"}


@dataclass(frozen=True)
class Guard:
    name: str
    race: str
    path: str
    code: str
    mutation: str
    tests: tuple[str, ...]
    backends: tuple[str, ...] = ("sqlite",)
    source: str = field(default="", compare=False)
    section: str = field(default="", compare=False)


def load(directory: Path = CATALOGUE_DIR) -> list[Guard]:
    guards = []
    for file in sorted(directory.glob("*.toml")):
        data = tomllib.loads(file.read_text())
        for entry in data.get("guard", []):
            unknown = set(entry) - FIELDS
            if unknown:
                raise ValueError(f"{file.name}: {entry.get('name')!r}: unknown fields {sorted(unknown)}")
            guards.append(Guard(
                name=entry["name"], race=entry["race"], path=entry["path"], code=entry["code"],
                mutation=entry["mutation"], tests=tuple(entry["tests"]),
                backends=tuple(entry.get("backends", ["sqlite"])), source=file.name,
                section=data.get("title", file.stem)))
    return guards


@dataclass(frozen=True)
class Kept:
    """A check kept in the code that is not a guard: removing it alone changes no outcome, because
    the guards it names already stop the same race (so no test can kill its mutation)."""

    name: str
    path: str
    code: str
    why: str
    covered_by: tuple[str, ...]


def load_kept(directory: Path = CATALOGUE_DIR) -> list[Kept]:
    kept = []
    for file in sorted(directory.glob("*.toml")):
        for entry in tomllib.loads(file.read_text()).get("kept", []):
            unknown = set(entry) - KEPT_FIELDS
            if unknown:
                raise ValueError(f"{file.name}: {entry.get('name')!r}: unknown fields {sorted(unknown)}")
            kept.append(Kept(entry["name"], entry["path"], entry["code"], entry["why"],
                             tuple(entry["covered_by"])))
    return kept


@dataclass(frozen=True)
class Exempt:
    """A condition that looks like a guard and is none (why says what it is instead)."""

    name: str
    path: str
    code: str
    why: str


def load_exempt(directory: Path = CATALOGUE_DIR) -> list[Exempt]:
    exempt = []
    for file in sorted(directory.glob("*.toml")):
        for entry in tomllib.loads(file.read_text()).get("exempt", []):
            unknown = set(entry) - EXEMPT_FIELDS
            if unknown:
                raise ValueError(f"{file.name}: {entry.get('name')!r}: unknown fields {sorted(unknown)}")
            exempt.append(Exempt(entry["name"], entry["path"], entry["code"], entry["why"]))
    return exempt


def load_watched(directory: Path = CATALOGUE_DIR) -> list[str]:
    return [path for file in sorted(directory.glob("*.toml"))
            for path in tomllib.loads(file.read_text()).get("watch", [])]


def exempt_problems(exempt: Exempt, tree: Path = ROOT) -> list[str]:
    target = tree / exempt.path
    if not target.is_file():
        return [f"{exempt.path} does not exist"]
    if (count := target.read_text().count(exempt.code)) != 1:
        return [f"its code occurs {count} times in {exempt.path} (must be exactly once)"]
    return [] if exempt.why.strip() else ["it says no why"]


def report(guards: list[Guard], kept: list[Kept], exempt: list[Exempt], watched: list[str]) -> str:
    from guard_report import render, uncovered

    paths = [g.path for g in guards] + [k.path for k in kept] + watched
    entries = [(e.path, e.code) for e in (*guards, *kept, *exempt)]
    return render(uncovered(ROOT, paths, entries))


def kept_problems(kept: Kept, guards: list[Guard], tree: Path = ROOT) -> list[str]:
    target = tree / kept.path
    found = [] if target.is_file() else [f"{kept.path} does not exist"]
    if not found and (count := target.read_text().count(kept.code)) != 1:
        found.append(f"its code occurs {count} times in {kept.path} (must be exactly once)")
    names = {g.name for g in guards}
    found += [f"it names no guard {name!r}" for name in kept.covered_by if name not in names]
    if not kept.covered_by:
        found.append("it names no guard that covers it")
    return found


def problems(guard: Guard, tree: Path = ROOT) -> list[str]:
    """What is wrong with an entry against the code in `tree` (empty: it is sound)."""
    found = []
    target = tree / guard.path
    if not target.is_file():
        return [f"{guard.path} does not exist"]
    count = target.read_text().count(guard.code)
    if count != 1:
        found.append(f"its code occurs {count} times in {guard.path} (must be exactly once)")
    if guard.code == guard.mutation:
        found.append("the mutation does not change the code")
    if not guard.race.strip() or not guard.tests:
        found.append("it names no race or no test")
    for backend in guard.backends:
        if backend not in BACKENDS:
            found.append(f"unknown backend {backend!r}")
    for node in guard.tests:
        file, _, name = node.partition("::")
        test_file = tree / file
        if not test_file.is_file():
            found.append(f"test file {file} does not exist")
        elif name and not re.search(rf"^\s*(async )?def {re.escape(name.split('[')[0].split('::')[-1])}\(",
                                    test_file.read_text(), re.M):  # a method's node: Class::test
            found.append(f"test {name} is not defined in {file}")
    return found


def _where(backends: tuple[str, ...]) -> str:
    if backends == ("postgres",):
        return " (killed on PostgreSQL, where replicas share one database)"
    return " (SQL: killed on SQLite and PostgreSQL)" if "postgres" in backends else ""


def scratch_copy(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def run(guard: Guard, backend: str, tree: Path) -> tuple[bool, str]:
    target = tree / guard.path
    source = target.read_text()
    target.write_text(source.replace(guard.code, guard.mutation, 1))
    try:
        env = {**os.environ, "PYTHONPATH": str(tree), "CONVERGEBOT_TEST_BACKENDS": backend,
               "CONVERGEBOT_TEST_REPEAT": "1"}
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *guard.tests],
            cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    finally:
        target.write_text(source)
    summary = next((line for line in reversed(result.stdout.splitlines()) if " in " in line), "")
    # Exit code 1 is "tests failed"; anything else (usage error, collection error) proves nothing.
    return result.returncode == 1, summary


def _imports_from(tree: Path) -> bool:
    probe = subprocess.run([sys.executable, "-c", "import bot; print(bot.__file__)"], cwd=tree,
                           env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    return probe.stdout.strip().startswith(str(tree))


def anchor(guard: Guard) -> str:
    """The guard's anchor in docs/guards.md (GitHub's heading slug)."""
    return re.sub(r"[^a-z0-9 _-]", "", guard.name.lower()).replace(" ", "-")


def markdown(guards: list[Guard], kept: list[Kept] = (), exempt: list[Exempt] = ()) -> str:
    """docs/guards.md: the catalogue for people, generated (`scripts/guards.py --markdown`)."""
    lines = ["# The guard catalogue", "",
             "Generated from `tests/guards/*.toml` by `scripts/guards.py --markdown`; do not edit by hand.",
             "`make guards` removes each guard in a scratch copy and runs its tests, which must fail.",
             "The test suite checks every entry against the code and runs a rotating subset.", ""]
    for file in sorted({g.source for g in guards}):
        section = [g for g in guards if g.source == file]
        lines += [f"## {section[0].section}", "", f"`tests/guards/{file}`", ""]
        for g in section:
            tests = ", ".join(f"`{t.split('::')[-1]}`" for t in g.tests)
            lines += [f"### {g.name}", "", g.race, "",
                      f"- guard: `{g.path}`" + _where(g.backends),
                      f"- killed by: {tests}", ""]
    if kept:
        lines += ["## Kept, but not guards", "",
                  "Checks that duplicate a guard: removing one alone changes no outcome (no test can",
                  "kill the mutation), so they are listed here with the guards that stop the race.", ""]
        for k in kept:
            covered = ", ".join(f"[{name}](#{anchor(next(g for g in guards if g.name == name))})"
                                for name in k.covered_by if any(g.name == name for g in guards))
            lines += [f"### {k.name}", "", k.why, "", f"- code: `{k.path}`", f"- covered by: {covered}", ""]
    if exempt:
        lines += ["## Not guards", "",
                  "Conditions that look like guards to `scripts/guards.py --report` (a compare-and-set's",
                  "WHERE, a lookup before a GitHub write, a cap or a deadline) and are none, each with why.", ""]
        for e in exempt:
            lines += [f"### {e.name}", "", e.why, "", f"- code: `{e.path}`", ""]
    return "\n".join(lines)


def pick(guards: list[Guard], n: int, seed: str) -> list[Guard]:
    return random.Random(seed).sample(guards, min(n, len(guards)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("words", nargs="*", help="only guards whose name contains one of these")
    parser.add_argument("--check", action="store_true", help="check the catalogue only; run no tests")
    parser.add_argument("--file", help="only the entries of this catalogue file (e.g. storage.toml)")
    parser.add_argument("--backend", choices=BACKENDS, help="only this backend")
    parser.add_argument("--pick", type=int, help="a rotating subset of this many guards")
    parser.add_argument("--seed", default=datetime.date.today().isoformat(), help="seed of --pick")
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE_DIR, help="the catalogue's directory")
    parser.add_argument("--markdown", action="store_true", help="print the catalogue as docs/guards.md")
    parser.add_argument("--report", action="store_true",
                        help="list the guard-like conditions of guarded and watched modules no entry lists")
    args = parser.parse_args(argv)

    guards = load(args.catalogue)
    kept = load_kept(args.catalogue)
    exempt = load_exempt(args.catalogue)
    if args.markdown:
        print(markdown(guards, kept, exempt), end="")
        return 0
    if args.report:
        print(report(guards, kept, exempt, load_watched(args.catalogue)))
        return 0
    broken = {g.name: problems(g) for g in guards}
    broken = {name: found for name, found in broken.items() if found}
    for name, found in broken.items():
        print(f"STALE    {name}: {'; '.join(found)}", flush=True)
    names = [g.name for g in guards]
    for k in kept:
        if found := kept_problems(k, guards):
            print(f"STALE    kept {k.name}: {'; '.join(found)}", flush=True)
            broken[f"kept: {k.name}"] = found
    for e in exempt:
        if found := exempt_problems(e):
            print(f"STALE    exempt {e.name}: {'; '.join(found)}", flush=True)
            broken[f"exempt: {e.name}"] = found
    for name in {n for n in names if names.count(n) > 1}:
        print(f"STALE    {name}: two entries have this name", flush=True)
        broken[name] = ["duplicate"]
    if args.check:
        total = len(guards) + len(kept) + len(exempt)
        print(f"{total - len(broken)} of {total} catalogue entries"
              " match the code")
        return 1 if broken else 0

    chosen = [g for g in guards if g.name not in broken
              and (not args.words or any(w in g.name for w in args.words))
              and (not args.file or g.source == Path(args.file).name)]
    if args.pick:
        chosen = pick(chosen, args.pick, args.seed)
        print(f"rotating subset (seed {args.seed}): {len(chosen)} guards", flush=True)
    runs = [(g, b) for g in chosen for b in g.backends if not args.backend or b == args.backend]
    survived = 0
    with tempfile.TemporaryDirectory(prefix="convergebot-guards-") as tmp:
        tree = Path(tmp)
        scratch_copy(tree)
        if not _imports_from(tree):
            print("the scratch copy's `bot` does not shadow the installed one; nothing would be tested")
            return 2
        for i, (guard, backend) in enumerate(runs, 1):
            caught, summary = run(guard, backend, tree)
            survived += not caught
            print(f"[{i}/{len(runs)}] {'killed  ' if caught else 'SURVIVED'} {guard.name} ({backend})"
                  f"  [{summary}]", flush=True)
    print(f"{len(runs) - survived} of {len(runs)} mutations killed by their tests"
          f"{f'; {len(broken)} stale entries' if broken else ''}")
    return 1 if survived or broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

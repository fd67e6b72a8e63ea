"""What the guard catalogue does not list: `scripts/guards.py --report`.

A guard the catalogue does not name is a guard no test is known to miss. This reads the modules
that hold guards (each entry's `path`) and those a catalogue file watches (its `watch` list), and
lists three kinds of condition that look like guards:

  where   a condition of a compare-and-set: an UPDATE's or DELETE's WHERE clause
  look    a condition tested before a GitHub write in the same function (a lookup, a marker, a
          "nothing left to do"), the write being one of `bot.github.WRITES`, or before an effect
          is recorded in the outbox (`outbox.merge(...)`: the write decided)
  cap     a comparison against a cap, a limit, a deadline, a timeout, a budget or a count of tries

Each one that no entry covers (a `[[guard]]`, a `[[kept]]` or an `[[exempt]]` whose `code` spans
its lines) is listed with its line. An `[[exempt]]` entry says why a condition is no guard (a
filter for display, a bound of a loop over pages): `name`, `path`, `code`, `why`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bot.github import WRITES

# Words that make a comparison a cap or a deadline: `attempts >= MAX_ATTEMPTS`, `now > deadline`.
_CAPPED = re.compile(r"(?i)cap|max|limit|deadline|timeout|budget|attempt|tries|expire|_seconds|_at\b|until|overdue")


@dataclass(frozen=True)
class Candidate:
    path: str
    line: int
    end_line: int
    kind: str  # where | look | cap
    text: str


def _chain_root_calls(node: ast.expr) -> Iterator[str]:
    """The names of the calls a method chain is built on: `update(Job).where(...)` gives
    `update`, then `where`."""
    while isinstance(node, ast.Call | ast.Attribute):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                yield func.id
            elif isinstance(func, ast.Attribute):
                yield func.attr
            node = func.value if isinstance(func, ast.Attribute) else func
        else:
            node = node.value


def _leaves(cond: ast.expr) -> Iterator[ast.expr]:
    """A WHERE argument's conjuncts: `and_(a, b)` and `a & b` give a and b."""
    if isinstance(cond, ast.Call) and isinstance(cond.func, ast.Name) and cond.func.id == "and_":
        for arg in cond.args:
            yield from _leaves(arg)
    elif isinstance(cond, ast.BinOp) and isinstance(cond.op, ast.BitAnd):
        yield from _leaves(cond.left)
        yield from _leaves(cond.right)
    elif isinstance(cond, ast.Starred):
        return  # a spread of conditions built elsewhere: their own lines are read there
    else:
        yield cond


def through_github(node: ast.expr) -> bool:
    """Whether an expression reaches GitHub's client: an attribute named `github`, or a call
    made on one (`rt.github.pr(key)`). tests/unit/test_import_graph.py's write check uses it too."""
    while isinstance(node, ast.Attribute | ast.Call):
        if isinstance(node, ast.Attribute) and node.attr == "github":
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


# The outbox's recording functions (bot/engine/outbox.py): each records a GitHub write to make.
RECORDS = frozenset({"request_review", "comment", "replies", "react", "merge", "update_branch", "check_run"})


def _writes(fn: ast.AST) -> list[int]:
    """The lines of `fn` that write to GitHub or record a write in the outbox."""
    return [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and ((n.func.attr in WRITES and through_github(n.func.value))
                 or (n.func.attr in RECORDS and isinstance(n.func.value, ast.Name) and n.func.value.id == "outbox"))]


def _mere_test(node: ast.Compare) -> bool:
    """A comparison that caps nothing: `x is None`, or membership in a literal set of words."""
    if all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
        return True
    return all(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and all(
        isinstance(c, ast.Tuple | ast.Set | ast.List) and all(isinstance(e, ast.Constant) for e in c.elts)
        for c in node.comparators)


def _dispatch(cond: ast.expr) -> bool:
    """A branch on a tag rather than a guard: `step.kind == "merge"`, `plan in ("a", "b")`,
    `isinstance(cmd, Refusal)`, or any of those joined by and/or."""
    if isinstance(cond, ast.BoolOp):
        return all(_dispatch(v) for v in cond.values)
    if isinstance(cond, ast.Call) and isinstance(cond.func, ast.Name) and cond.func.id == "isinstance":
        return True

    def word(node: ast.expr) -> bool:
        if isinstance(node, ast.Tuple | ast.Set | ast.List):
            return all(word(e) for e in node.elts)
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    return isinstance(cond, ast.Compare) and all(word(c) for c in cond.comparators)


def candidates(path: Path, rel: str) -> list[Candidate]:
    source = path.read_text()
    tree = ast.parse(source)
    found: list[Candidate] = []

    def add(node: ast.expr, kind: str) -> None:
        text = " ".join((ast.get_source_segment(source, node) or "").split())
        found.append(Candidate(rel, node.lineno, node.end_lineno or node.lineno, kind, text))

    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "where"
                and {"update", "delete"} & set(_chain_root_calls(node.func.value))):
            for arg in node.args:
                for leaf in _leaves(arg):
                    add(leaf, "where")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (writes := _writes(node)):
            last = max(writes)
            for inner in ast.walk(node):
                test = inner.test if isinstance(inner, ast.If | ast.IfExp | ast.While) else None
                if test is not None and test.lineno < last and not _dispatch(test):
                    add(test, "look")
                if isinstance(inner, ast.comprehension) and inner.ifs and inner.ifs[0].lineno < last:
                    for cond in inner.ifs:
                        if not _dispatch(cond):
                            add(cond, "look")
        if isinstance(node, ast.Compare) and not _mere_test(node) and not _dispatch(node):
            operands = [node.left, *node.comparators]
            if any(_CAPPED.search(ast.get_source_segment(source, o) or "") for o in operands):
                add(node, "cap")
    # One line read once: a cap inside a WHERE clause or a lookup is listed under the first kind.
    seen: set[tuple[int, str]] = set()
    unique = []
    for c in sorted(found, key=lambda c: (c.line, ("where", "look", "cap").index(c.kind))):
        if (c.line, c.text) in seen or any(c.line == u.line and c.text in u.text for u in unique):
            continue
        seen.add((c.line, c.text))
        unique.append(c)
    return unique


def _lines_of(source: str, code: str) -> range | None:
    at = source.find(code)
    if at < 0:
        return None
    first = source.count("\n", 0, at) + 1
    return range(first, first + code.count("\n") + 1)


def uncovered(root: Path, paths: Iterable[str], entries: Iterable[tuple[str, str]]) -> dict[str, list[Candidate]]:
    """Per module, the candidates no entry's code spans (`entries`: (path, code) pairs)."""
    spans: dict[str, list[range]] = {}
    for path, code in entries:
        target = root / path
        if target.is_file() and (lines := _lines_of(target.read_text(), code)) is not None:
            spans.setdefault(path, []).append(lines)
    report: dict[str, list[Candidate]] = {}
    for rel in sorted(set(paths)):
        target = root / rel
        if not target.is_file() or target.suffix != ".py":
            continue
        covered = spans.get(rel, [])
        report[rel] = [c for c in candidates(target, rel)
                       if not any(set(range(c.line, c.end_line + 1)) & set(span) for span in covered)]
    return report


def render(report: dict[str, list[Candidate]]) -> str:
    lines = []
    for rel, found in report.items():
        if found:
            lines.append(f"{rel}: {len(found)} unlisted")
            lines += [f"  {c.line:>4} {c.kind:<5} {c.text[:110]}" for c in found]
    total = sum(len(f) for f in report.values())
    lines.append(f"{total} conditions unlisted in {sum(1 for f in report.values() if f)} of {len(report)} modules read")
    return "\n".join(lines)

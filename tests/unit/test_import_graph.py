"""The house as its imports draw it: no import circle, the rules without I/O, storage and the
simulator standing without the bot, GitHub's writes made in the effects package only.

Read from the source with `ast` (nothing is imported). An import under `if TYPE_CHECKING:`
runs never and draws no arrow, except in the simulator's own graph, which has no circle even
with them (`type_checking=True`); every other import does, at module level or in a function.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from bot.github import WRITES

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from guard_report import through_github  # noqa: E402  (the report reads writes the same way)

PACKAGES = ("bot", "storage", "simulator", "sharedio", "migrations")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _type_checking_only(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING"):
            skip.update(id(sub) for sub in ast.walk(node))
    return skip


def imported(module: str, type_checking: bool = False) -> Iterator[tuple[str, int]]:
    """(imported name, line) of each import of `module` that runs (with `type_checking`, also
    each one under `if TYPE_CHECKING:`): a module's name where it names one, else the name as
    written (`from x import y` gives `x.y` when that is a module)."""
    path = modules()[module]
    tree = ast.parse(path.read_text())
    skip = set() if type_checking else _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in modules() else base), node.lineno


def _ours(name: str) -> str | None:
    """The module of this tree `name` is, or is in (a name imported from it), else None."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


@cache
def graph(type_checking: bool = False) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module in modules():
        targets = {_ours(name) for name, _ in imported(module, type_checking)}
        out[module] = {t for t in targets if t and t != module}
    return out


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(g.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_finds_a_circle_when_there_is_one():
    # The check itself: a circle drawn by hand is found.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    assert circles(graph()) == []


def test_the_simulator_has_no_import_circle_even_in_its_type_hints():
    # Its model builds no web face and loads no scenario, and its handlers name what they use
    # rather than the whole Simulator, so not even a type hint points back up.
    simulator = {module: {t for t in targets if t.split(".")[0] == "simulator"}
                 for module, targets in graph(type_checking=True).items()
                 if module.split(".")[0] == "simulator"}
    assert circles(simulator) == []


def test_the_graph_reads_type_checking_imports_when_asked():
    # The check itself: imports under TYPE_CHECKING are found when asked for, so an empty
    # finding above is not for want of reading them.
    assert any(graph(type_checking=True)[m] - graph()[m] for m in modules())


# What the rules may import: the standard library's pure modules, two parsers, and the
# vocabulary below them. No database, network, clock-reading service, subprocess or file I/O.
RULES_MAY_IMPORT = {
    "__future__", "collections", "dataclasses", "datetime", "enum", "functools", "hashlib",
    "itertools", "json", "math", "re", "shlex", "string", "textwrap", "types", "typing",
    "pydantic", "markdown_it",
    "bot.rules", "storage.keys", "storage.statuses",
}


def test_the_rules_import_nothing_with_io():
    bad = []
    for module in modules():
        if not module.startswith("bot.rules"):
            continue
        for name, line in imported(module):
            if not any(name == ok or name.startswith(ok + ".") for ok in RULES_MAY_IMPORT):
                bad.append(f"{modules()[module].relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


def test_storage_and_the_simulator_import_nothing_of_the_bot():
    bad = []
    for module in modules():
        if module.split(".")[0] not in ("storage", "simulator", "sharedio", "migrations"):
            continue
        for name, line in imported(module):
            if name == "bot" or name.startswith("bot."):
                bad.append(f"{modules()[module].relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


WRITERS = ("bot.effects.", "bot.github.")
ALSO_ALLOWED = {("bot.intake.redelivery", "redeliver")}


def test_github_writes_are_made_in_the_effects_package_only():
    bad = []
    for module, path in modules().items():
        if not module.startswith("bot.") or module.startswith(WRITERS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.func if isinstance(node, ast.Call) else None
            # `<anything>.github.<write>(...)` or `<anything>.github.pr(key).<write>(...)`: the
            # runtime's client, however it is reached, or its facade of one repository or PR.
            if (isinstance(call, ast.Attribute) and call.attr in WRITES and through_github(call.value)
                    and (module, call.attr) not in ALSO_ALLOWED):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} calls github.{call.attr}")
    assert bad == []


def test_the_write_check_sees_a_write_through_the_facade():
    # The check itself: a write through a PR's facade is seen as one.
    call = ast.parse("rt.github.pr(key).merge(sha)").body[0].value.func
    assert call.attr in WRITES and through_github(call.value)
    assert not through_github(ast.parse("outbox.merge").body[0].value.value)


def test_the_write_check_sees_a_write_where_it_is_made():
    # The check itself: the effects do write, so an empty finding is not for want of looking.
    effects = [m for m in modules() if m.startswith("bot.effects.")]
    seen = {call.attr for m in effects for call in ast.walk(ast.parse(modules()[m].read_text()))
            if isinstance(call, ast.Attribute) and call.attr in WRITES}
    assert {"merge", "create_check_run", "comment_once", "request_review", "update_branch"} <= seen


# The command line imports what a subcommand needs when it runs (a `--help` or a `status` does
# not load the server, the simulator or the GitHub client): the one place an import may wait.
LAZY_IMPORTS_ALLOWED = {"bot.surfaces.cli"}


def test_imports_are_made_at_module_level_outside_the_command_line():
    late = []
    for module, path in modules().items():
        if module in LAZY_IMPORTS_ALLOWED or module.startswith("migrations"):
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                late += [f"{path.relative_to(ROOT)}:{n.lineno} in {fn.name}" for n in ast.walk(fn)
                         if isinstance(n, ast.Import | ast.ImportFrom)]
    assert late == []


def folder_of(module: str) -> str:
    """A module's folder: `bot.<folder>` within the bot (a package's `__init__` is its own
    folder's), else its top-level package; `bot.__main__`, the command line's entry that imports
    the surfaces, is a floor of its own above them all."""
    if module == "bot.__main__":
        return module
    path = modules().get(module)
    package = module if path is not None and path.name == "__init__.py" else module.rpartition(".")[0]
    parts = (package or module).split(".")
    return ".".join(parts[:2]) if parts[0] == "bot" else parts[0]


def test_the_folder_graph_finds_a_circle_the_module_graph_hides():
    # The check itself: two modules of two folders each importing the other's other module.
    folded: dict[str, set[str]] = {}
    for a, b in (("bot.x.one", "bot.y.two"), ("bot.y.three", "bot.x.four")):
        folded.setdefault(folder_of(a), set()).add(folder_of(b))
    assert circles(folded) == [["bot.x", "bot.y"]]


def test_no_folder_imports_one_that_imports_it_back():
    folded: dict[str, set[str]] = {}
    for module, targets in graph().items():
        folded.setdefault(folder_of(module), set()).update(
            folder_of(t) for t in targets if folder_of(t) != folder_of(module))
    assert circles(folded) == []

"""The guard catalogue (tests/guards/*.toml, scripts/guards.py) stays true to the code.

Every run checks each entry against the code and that docs/guards.md is the catalogue's page; it
also breaks a rotating subset of guards (`CONVERGEBOT_GUARDS_PICK`, default 2, seeded by the
commit) and requires their tests to fail. `make guards` runs them all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import guards  # noqa: E402

PICK = int(os.environ.get("CONVERGEBOT_GUARDS_PICK", "2"))


def _script(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "guards.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_every_entry_matches_the_code_and_names_its_race_and_tests():
    catalogue = guards.load()
    assert len(catalogue) >= 16
    assert {name: found for g in catalogue if (found := guards.problems(g)) for name in [g.name]} == {}
    names = [g.name for g in catalogue]
    assert len(names) == len(set(names))
    assert {k.name: found for k in guards.load_kept() if (found := guards.kept_problems(k, catalogue))} == {}
    assert {e.name: found for e in guards.load_exempt() if (found := guards.exempt_problems(e))} == {}


def test_docs_guards_md_is_the_catalogue():
    page = (ROOT / "docs" / "guards.md").read_text()
    assert page == guards.markdown(guards.load(), guards.load_kept(), guards.load_exempt()), "regenerate: scripts/guards.py --markdown > docs/guards.md"


def test_every_guard_link_in_the_readme_and_docs_names_an_entry():
    anchors = {guards.anchor(g) for g in guards.load()}
    for page in ("README.md", "docs/architecture.md"):
        linked = re.findall(r"guards\.md#([\w-]+)", (ROOT / page).read_text())
        assert set(linked) <= anchors, f"{page} links to no entry: {set(linked) - anchors}"
    assert re.findall(r"guards\.md#([\w-]+)", (ROOT / "README.md").read_text())


def test_a_guard_no_test_catches_is_reported_as_survived(tmp_path):
    # The harness itself must be able to fail: a "guard" whose mutation only rewrites a comment
    # survives its test, and the script says so and exits non-zero.
    (tmp_path / "fake.toml").write_text(
        'title = "fake"\n[[guard]]\nname = "a comment is no guard"\nrace = "none."\n'
        'path = "storage/keys.py"\n'
        f"code = '''{(ROOT / 'storage/keys.py').read_text().splitlines()[0]}'''\n"
        "mutation = '''\"\"\"A rewritten docstring.\"\"\"'''\n"
        'tests = ["tests/unit/test_prkey.py"]\n')
    result = _script("--catalogue", str(tmp_path), timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "SURVIVED a comment is no guard" in result.stdout


_SOURCE = '''
async def settle(rt, s, key, head):
    await s.exec(update(Row).where(Row.key == key, and_(Row.head == head, Row.state == "open")))
    if await rt.github.pr(key).has_marker(head):
        return
    if tries >= MAX_TRIES:
        return
    await rt.github.pr(key).merge(head)
'''


def test_the_report_lists_what_looks_like_a_guard_and_no_entry_covers(tmp_path):
    import guard_report

    module = tmp_path / "m.py"
    module.write_text(_SOURCE)
    found = {(c.kind, c.text) for c in guard_report.candidates(module, "m.py")}
    assert found == {("where", "Row.key == key"), ("where", "Row.head == head"),
                     ("where", 'Row.state == "open"'),
                     ("look", "await rt.github.pr(key).has_marker(head)"), ("look", "tries >= MAX_TRIES")}
    # An entry's code spanning a condition's line covers it; the rest stay listed.
    left = guard_report.uncovered(tmp_path, ["m.py"], [("m.py", "if tries >= MAX_TRIES:")])
    assert {c.text for c in left["m.py"]} == {"Row.key == key", "Row.head == head", 'Row.state == "open"',
                                             "await rt.github.pr(key).has_marker(head)"}


def test_the_report_reads_guarded_and_watched_modules_and_an_exempt_entry_covers(tmp_path):
    (tmp_path / "g.toml").write_text('''
title = "t"
watch = ["bot/engine/merge_stage.py"]
[[exempt]]
name = "a display filter"
path = "bot/engine/liveness.py"
code = "x"
why = "shown only"
''')
    assert guards.load_watched(tmp_path) == ["bot/engine/merge_stage.py"]
    (exempt,) = guards.load_exempt(tmp_path)
    assert guards.exempt_problems(exempt) != []  # "x" is no line of liveness.py's once
    out = _script("--report", "--catalogue", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "bot/engine/merge_stage.py" in out.stdout and "modules read" in out.stdout


def test_a_stale_entry_fails_the_check(tmp_path):
    (tmp_path / "stale.toml").write_text(
        'title = "stale"\n[[guard]]\nname = "gone"\nrace = "none."\npath = "storage/keys.py"\n'
        "code = '''this code is not in the file'''\nmutation = '''x'''\n"
        'tests = ["tests/unit/test_prkey.py::test_no_such_test"]\n')
    result = _script("--catalogue", str(tmp_path), "--check", timeout=60)
    assert result.returncode == 1
    assert "occurs 0 times" in result.stdout and "test_no_such_test is not defined" in result.stdout


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return head.stdout.strip() or "no-commit"


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(PICK == 0, reason="CONVERGEBOT_GUARDS_PICK=0")
def test_a_rotating_subset_of_guards_is_killed_by_their_tests():
    backends = os.environ.get("CONVERGEBOT_TEST_BACKENDS", "sqlite,postgres")
    only = [] if "postgres" in backends else ["--backend", "sqlite"]
    result = _script("--pick", str(PICK), "--seed", _commit(), *only)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{PICK} guards" in result.stdout

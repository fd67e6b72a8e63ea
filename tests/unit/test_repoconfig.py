"""A repository's `.github/convergebot.toml`: allowed keys over the global config, nothing else."""

from __future__ import annotations

import pytest

from bot.config import MAX_ROUNDS, Config
from bot.engine.repoconfig import PATH, RepoConfigError, load, parse, touched
from bot.fixers.base import FixRequest
from bot.fixers.prompt import render_prompt

BASE = Config.model_validate({"convergence": {"max_rounds": 8, "reviewers": ["copilot"], "maintainers": ["ops"],
                                              "label": "converge", "churn_rounds": 4},
                              "merge": {"method": "squash", "require_approval": True},
                              "fixer": {"kind": "command", "command": ["agent"]}})

FULL = """
[convergence]
max_rounds = 3
reviewers = ["alice"]
required_checks = ["ci/test"]
maintainers = ["bob"]

[merge]
method = "rebase"

[fixer]
prompt_append = "Run make test."
"""


def test_every_allowed_key_is_applied_over_the_global_config():
    config = parse(FULL, BASE)
    c = config.convergence
    assert (c.max_rounds, c.reviewers, c.required_checks, c.maintainers) == (3, ["alice"], ["ci/test"], ["bob"])
    assert config.merge.method == "rebase" and config.fixer.prompt_append == "Run make test."
    # Everything the file does not set stays the global value.
    assert (c.label, c.churn_rounds, config.merge.require_approval) == ("converge", 4, True)
    assert config.fixer.command == ["agent"] and config.database == BASE.database


def test_an_empty_file_or_a_partial_section_changes_only_what_it_names():
    assert parse("", BASE) == BASE
    config = parse("[convergence]\nmax_rounds = 2\n", BASE)
    assert config.convergence.max_rounds == 2 and config.convergence.reviewers == ["copilot"]


@pytest.mark.parametrize(("text", "expected"), [
    ("[server]\nport = 1\n", "line 1: [server] cannot be set by a repository"),
    ("[github]\ntoken = 'x'\n", "[github] cannot be set by a repository"),
    ("[database]\nurl = 'sqlite://'\n", "[database] cannot be set by a repository"),
    ("[convergence]\nmax_rounds = 2\nlabel = 'x'\n", "line 3: unknown key 'label' in [convergence]"),
    ("[merge]\nrequire_approval = false\n", "unknown key 'require_approval' in [merge]"),
    ("[fixer]\ncommand = ['sh']\n", "unknown key 'command' in [fixer]"),
    ("max_rounds = 2\n", "unknown key 'max_rounds'"),
    ("convergence = 1\n", "convergence must be a table"),
])
def test_anything_but_the_allowed_keys_is_refused(text, expected):
    with pytest.raises(RepoConfigError) as e:
        parse(text, BASE)
    assert str(e.value).startswith(PATH) and expected in str(e.value)
    assert "allowed: [convergence] max_rounds" in str(e.value) or "must be a table" in str(e.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("[convergence]\nmax_rounds = 0\n", "line 2: [convergence] max_rounds: Input should be greater than or equal to 1"),
    (f"[convergence]\n\nmax_rounds = {MAX_ROUNDS + 1}\n",
     f"line 3: [convergence] max_rounds: Input should be less than or equal to {MAX_ROUNDS}"),
    ("[merge]\nmethod = 'fast-forward'\n", "[merge] method: Input should be 'squash', 'merge' or 'rebase'"),
    ("[convergence]\nreviewers = 'alice'\n", "[convergence] reviewers: Input should be a valid list"),
    ("[fixer]\nprompt_append = '" + "x" * 4001 + "'\n", "[fixer] prompt_append"),
])
def test_the_global_models_bounds_apply(text, expected):
    with pytest.raises(RepoConfigError, match=None) as e:
        parse(text, BASE)
    assert expected in str(e.value)


def test_a_syntax_error_names_the_line():
    with pytest.raises(RepoConfigError) as e:
        parse("[convergence]\nmax_rounds = = 1\n", BASE)
    assert str(e.value).startswith(f"{PATH}: invalid TOML:") and "line 2" in str(e.value)


def test_an_invalid_file_means_the_global_settings_and_a_problem_to_report():
    result = load(("[server]\nport = 1\n", "abc123"), BASE)
    assert result.config == BASE and result.sha == "abc123" and "[server]" in result.problem
    assert load(None, BASE).config == BASE and load(None, BASE).problem is None
    good = load(("[merge]\nmethod = 'merge'\n", "def"), BASE)
    assert good.config.merge.method == "merge" and good.problem is None


def _push(ref: str, **commit) -> dict:
    return {"ref": ref, "repository": {"full_name": "acme/app", "default_branch": "main"},
            "commits": [{"added": [], "modified": [], "removed": [], **commit}]}


def test_a_push_to_the_default_branch_touching_the_file_is_seen():
    assert touched(_push("refs/heads/main", modified=[PATH])) == "acme/app"
    assert touched(_push("refs/heads/main", removed=[PATH])) == "acme/app"
    assert touched(_push("refs/heads/main", modified=["README.md"])) is None
    assert touched(_push("refs/heads/feature", added=[PATH])) is None
    # Whatever shape a payload has, it is read without an error.
    assert touched({"ref": "refs/heads/main", "repository": "x", "commits": 3}) is None
    assert touched({**_push("refs/heads/main"), "commits": [{"added": 5}, "x"]}) is None


def _request(prompt_append: str) -> FixRequest:
    return FixRequest(pr_key="acme/app#1", round_no=1, attempt=0, title="t", description="", head_branch="feat",
                      entry_head="abc", clone_url="", token=None, findings=(), instructions=(),
                      prompt_append=prompt_append)


def test_prompt_append_is_added_to_the_fixer_prompt():
    assert "## Notes from the repository\n\nRun make test." in render_prompt(_request("Run make test.\n"))
    assert "Notes from the repository" not in render_prompt(_request("  "))


def test_a_file_nested_too_deeply_is_refused_not_raised():
    # tomllib recurses per nesting level: a hostile file must not stop its repository's PRs.
    result = load(("x = " + "[" * 2000 + "]" * 2000, "sha1"), Config())
    assert result.config == Config() and "nested too deeply" in result.problem

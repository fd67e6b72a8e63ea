import pytest

from bot.engine.merge import MergeView, decide_merge, find_cycle, parse_dependencies

H1, H2 = "1" * 40, "2" * 40


def view(**kw) -> MergeView:
    base = dict(status="waiting_merge", head=H1, converged_head=H1, mergeable_state="clean",
                unmerged_deps=(), cycle=None, require_approval=False, approved=False)
    return MergeView(**(base | kw))


def test_dependencies_are_parsed_case_insensitively_comma_or_space_separated():
    body = "Adds x.\n\ndepends-on: octo/lib#3, #4  other/repo#5\nDEPENDS ON: #4\nnot depends-on: x#1"
    assert parse_dependencies(body, "octo/app") == ["octo/lib#3", "octo/app#4", "other/repo#5"]
    assert parse_dependencies(None, "octo/app") == []
    assert parse_dependencies("Depends-on: nonsense, #x", "octo/app") == []


def test_cycles_are_found():
    edges = {"a#1": ["a#2"], "a#2": ["a#3"], "a#3": ["a#1"], "b#1": ["a#1"]}
    assert find_cycle("a#1", edges) == ["a#1", "a#2", "a#3", "a#1"]
    assert find_cycle("b#1", edges) is None


@pytest.mark.parametrize("state,kind", [
    ("clean", "merge"), ("unstable", "merge"), ("has_hooks", "merge"), ("behind", "update_branch"),
    ("dirty", "escalate"), ("blocked", "wait"), ("unknown", "wait"), (None, "wait"),
])
def test_mergeability(state, kind):
    assert decide_merge(view(mergeable_state=state)).kind == kind


def test_dependencies_gate_the_merge():
    assert decide_merge(view(status="waiting_deps", unmerged_deps=("o/r#1",))).kind == "wait"
    assert decide_merge(view(status="waiting_deps")).kind == "to_merge"
    assert decide_merge(view(status="waiting_deps", cycle=("a", "b", "a"))).kind == "escalate"


def test_a_push_after_convergence_starts_a_new_round():
    assert decide_merge(view(head=H2)).kind == "new_round"
    assert decide_merge(view(status="waiting_deps", head=H2)).kind == "new_round"


def test_approval_required():
    assert decide_merge(view(require_approval=True)).kind == "wait"
    assert decide_merge(view(require_approval=True, approved=True)).kind == "merge"


def test_an_unconfirmed_merge_is_re_read_not_retried():
    assert decide_merge(view(status="merging")).kind == "back_to_waiting"

from datetime import UTC, datetime
from types import SimpleNamespace

from bot.engine.observe import Observation, observe

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ROW = SimpleNamespace(status="waiting_review", title="old", url="u", head_branch="feat", head_repo=None, author="a",
                      head_sha="1" * 40, latest_review_id=10)


def pr(**kw):
    return {"title": "T", "html_url": "https://x/pull/1", "state": "open", "merged": False,
            "head": {"ref": "feat", "sha": "2" * 40}, "user": {"login": "alice"}} | kw


def test_head_move_and_new_review_are_noticed():
    out = observe(ROW, Observation(pr(), "3" * 40, 11, NOW))
    assert out.changes == ("head_moved", "new_review")
    assert out.values["head_sha"] == "3" * 40  # the ref wins over the PR object's lagging sha
    assert out.end_run is None and "status" not in out.values


def test_unreadable_ref_falls_back_to_the_pr_head():
    out = observe(ROW, Observation(pr(), None, 10, NOW))
    assert out.values["head_sha"] == "2" * 40 and out.changes == ("head_moved",)


def test_nothing_changed():
    out = observe(ROW, Observation(pr(head={"ref": "feat", "sha": "1" * 40}), "1" * 40, 10, NOW))
    assert out.changes == ()


def test_merged_out_of_band_completes_the_run():
    out = observe(ROW, Observation(pr(state="closed", merged=True, merged_at="2026-11-29T11:00:00Z"),
                                   "1" * 40, 10, NOW))
    assert (out.values["status"], out.end_run, out.changes[-1]) == ("merged", "completed", "merged")
    assert out.values["merged_at"] == datetime(2026, 11, 29, 11, 0, tzinfo=UTC)


def test_closed_unmerged_abandons():
    out = observe(ROW, Observation(pr(state="closed"), "1" * 40, 10, NOW))
    assert (out.values["status"], out.end_run) == ("abandoned", "terminated")


def test_the_head_repository_is_recorded_a_fork_s_for_a_pr_from_a_fork():
    fork = pr(head={"ref": "feat", "sha": "2" * 40, "repo": {"full_name": "dev/app"}})
    assert observe(ROW, Observation(fork, "2" * 40, 10, NOW)).values["head_repo"] == "dev/app"
    # A deleted fork's PR has no head repository: the last one known stays.
    gone = pr(head={"ref": "feat", "sha": "2" * 40, "repo": None})
    row = SimpleNamespace(**{**vars(ROW), "head_repo": "dev/app"})
    assert observe(row, Observation(gone, "2" * 40, 10, NOW)).values["head_repo"] == "dev/app"


def test_a_title_read_as_only_whitespace_keeps_the_one_stored():
    assert observe(ROW, Observation(pr(title="  \t"), None, 10, NOW)).values["title"] == "old"
    assert observe(ROW, Observation(pr(title=" New "), None, 10, NOW)).values["title"] == "New"

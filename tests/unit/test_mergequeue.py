"""The merge queue's rules (bot/engine/merge_queue.py): what the merge effect and a `merging`
PR's step do with what GitHub says of the queue."""

import pytest

from bot.engine.merge_queue import (
    Queue,
    decide_effect,
    decide_settle,
    queued_text,
    read_queue,
    removal_reason,
)
from bot.rules.merge import FailedCheck

GROUP = "c" * 40


def queue(**kw) -> Queue:
    return Queue(**({"node_id": "PR_1", "state": "OPEN", "required": True, "queued": False} | kw))


def test_github_s_answer_reads_as_the_queue_and_its_group():
    raw = {"id": "PR_1", "state": "OPEN", "isMergeQueueEnabled": True, "isInMergeQueue": True,
           "mergeQueueEntry": {"id": "MQE_1", "state": "AWAITING_CHECKS", "position": 2, "headCommit": {"oid": GROUP}}}
    assert read_queue(raw) == queue(queued=True, position=2, group=GROUP)
    # Null or odd fields GitHub may send read as absent, never a crash.
    assert read_queue({"id": "PR_1", "mergeQueueEntry": None, "isMergeQueueEnabled": None}) == queue(required=False)
    assert read_queue(raw | {"mergeQueueEntry": {"position": "2", "headCommit": {"oid": "HEAD"}}}).group is None


@pytest.mark.parametrize(("q", "first", "kind"), [
    (queue(required=False), True, "merge"),  # no queue: the REST merge as before
    (queue(state="MERGED"), False, "merge"),  # merged already: run_merge records it
    (queue(state="CLOSED"), True, "merge"),
    (queue(queued=True, position=1, group=GROUP), False, "queued"),  # the lost answer's enqueue happened
    (queue(queued=True), True, "queued"),
    (queue(), True, "enqueue"),
    (queue(), False, "back"),  # a retry never queues blind: it may have been queued and removed since
])
def test_the_merge_effect_queues_once(q, first, kind):
    assert decide_effect(q, first).kind == kind


@pytest.mark.parametrize(("q", "kind"), [
    (queue(required=False), "merge"),
    (queue(state="MERGED"), "wait"),
    (queue(queued=True, position=3), "queued"),
    (queue(), "back"),
])
def test_a_merging_pr_with_its_effect_done(q, kind):
    assert decide_settle(q).kind == kind


def test_the_row_names_the_group_and_the_reason_names_its_failing_checks():
    text = queued_text(queue(queued=True, position=2, group=GROUP))
    assert text == f"in the merge queue, position 2 (merge group {GROUP})"
    assert queued_text(queue(queued=True)) == "in the merge queue"
    failing = [FailedCheck("ci", "failure"), FailedCheck("lint", "timed_out")]
    assert removal_reason(GROUP, failing) == "removed from the merge queue: `ci` failure, `lint` timed_out on merge group ccccccc"
    assert removal_reason(GROUP, []) == "removed from the merge queue (no failing check on merge group ccccccc)"
    assert removal_reason(None, failing) == "left the merge queue without merging"

"""Stored findings and settlements a newer release wrote, read by this one (bot/rules/model.py
`known_fields`)."""

from __future__ import annotations

import json

from bot.engine.read import findings_of
from bot.rules.findings import settled_of


def test_stored_findings_and_settlements_a_newer_release_wrote_are_read_without_its_new_fields():
    # Through a rolling deploy an older release reads rows a newer one wrote: a field it does not
    # know is left out, not a TypeError that fails the job.
    (f,) = findings_of(json.dumps([{"thread_id": "T1", "comment_id": 1, "path": "a.py", "line": 3, "body": "x",
                                     "author": "copilot", "fingerprint": "f1", "field_of_a_newer_release": 1}]))
    assert (f.path, f.line, f.fingerprint) == ("a.py", 3, "f1")
    (settled,) = settled_of(json.dumps([{"fingerprint": "f1", "action": "fixed", "round_no": 2,
                                         "url": "https://x/1", "how_sure": "very"}]))
    assert (settled.fingerprint, settled.action, settled.round_no) == ("f1", "fixed", 2)

"""`convergebot demo --json`, as a user runs it."""

import json
import subprocess
import sys
from datetime import datetime


def test_demo_merges_every_pr_as_scripted():
    # The demo gives itself 110 s; it exits 1 if the script does not play out by then.
    p = subprocess.run([sys.executable, "-m", "bot", "demo", "--json"], capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads(p.stdout)
    assert [(r["status"], r["rounds"], r["escalations"]) for r in rows] == [
        ("merged", 3, 0),   # converges in 3 rounds
        ("merged", 2, 1),   # escalates, a maintainer answers
        ("merged", 2, 0),   # a husk is rerun
        ("merged", 1, 0),   # waits for its dependency
        ("merged", 3, 0),   # conflicts with main: a conflict round, then a fresh review
    ]
    assert all(r["merged_at"] and r["pr_key"].startswith("octo-org/widgets#") for r in rows)
    # The fourth PR says `Depends-on:` the first, which takes 3 rounds to its own 1: it waits.
    assert [r["depends_on"] for r in rows] == [[], [], [], [rows[0]["pr_key"]], []]
    # Times, not strings: a merge the bot read back from GitHub is stamped to the second.
    merged = [datetime.fromisoformat(r["merged_at"]).replace(microsecond=0) for r in rows]
    assert merged[3] >= merged[0], "the dependent PR merged after its dependency"
    assert "all 5 PRs merged" in p.stderr
    assert "conflict round: conflicts with the base in `README.md`" in p.stderr

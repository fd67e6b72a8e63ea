"""The bot against answers GitHub's API does not document (the simulator's `rewrite` fault): a
PR read through an HTML page, a body cut short, none, fields missing or of another type, null
list items and a config file whose content is not base64 still merges; each such answer is one
`github.malformed` line and a job retried, never a traceback, and no surface answers 5xx."""

from __future__ import annotations

import logging

from structlog.testing import capture_logs

from .harness import REPO, bot_on_simulator, open_and_enroll, steps

CONFIG = ".github/convergebot.toml"

# The first answer of each route a PR's rounds read, rewritten (in this order on one route),
# and what the log line names of its request.
FAULTS = [
    ("GET", r"/pulls/\d+$", "html", f"GET /repos/{REPO}/pulls/"),
    ("GET", r"/pulls/\d+$", "missing", f"GET /repos/{REPO}/pulls/"),
    ("POST", r"^/graphql$", "truncated", "graphql "),
    ("GET", r"/git/ref/heads/", "empty", f"GET /repos/{REPO}/git/ref/heads/"),
    ("GET", r"/permission$", "wrong_types", f"GET /repos/{REPO}/collaborators/maint/permission"),
    ("GET", r"/contents/", "bad_base64", f"GET /repos/{REPO}/contents/"),
    ("GET", r"/reviews$", "null_nodes", None),  # a first read may find no review to null
]


def _tracebacks(logs: list[dict], records: list[logging.LogRecord]) -> list[str]:
    return ([str(line) for line in logs if line.get("exc_info") or line.get("exception")]
            + [r.getMessage() for r in records if r.exc_info])


async def test_a_pr_read_through_malformed_answers_merges_with_one_line_each_and_no_traceback(
        tmp_path, db_url, caplog):
    caplog.set_level(logging.WARNING)
    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        await h.sim.push(REPO, "main", {CONFIG: "[convergence]\nmax_rounds = 4\n"})
        faults = [h.sim.inject_fault(path, method=method, rewrite=kind, count=1) for method, path, kind, _ in FAULTS]
        with capture_logs() as logs:
            key, number = await open_and_enroll(h)
            view = await h.wait_status(str(key), "merged", timeout=90)
            detail = await h.http.get(f"/api/prs/{REPO}/{number}")
            page = await h.http.get(f"/prs/{REPO}/{number}")
        assert view.pr.outcome == "merged" and view.pr.max_rounds == 4  # the file, read again
        assert [f.hits for f in faults] == [1] * len(FAULTS)
        said = [line for line in logs if line["event"] == "github.malformed"]
        for _, _, kind, named in FAULTS:
            assert named is None or any(line["request"].startswith(named) for line in said), kind
        assert {line["status"] for line in said} == {200}
        retried = [line for line in logs if line["event"] == "job.error"]
        assert retried and all("Malformed" in line["error"] for line in retried)
        assert detail.status_code == 200 and page.status_code == 200
        assert all(d.status is not None and d.status < 500 for d in h.sim.deliveries)
        assert _tracebacks(logs, caplog.records) == []


async def test_a_submission_through_the_api_reads_a_config_not_base64_as_unreadable(tmp_path, db_url, caplog):
    """POST /api/prs reads the repository's file for max_rounds: one not base64 means the
    global settings, never a 500."""
    caplog.set_level(logging.WARNING)
    async with bot_on_simulator(tmp_path, db_url) as h:
        other = "acme/other"
        await h.sim.create_repo(other, files={CONFIG: "[convergence]\nmax_rounds = 4\n"})
        pr = await h.sim.open_pr(other, title="Change", head="feat", author="dev", files={"a.txt": "a\n"})
        fault = h.sim.inject_fault(r"/contents/", method="GET", rewrite="bad_base64", count=1)
        with capture_logs() as logs:
            r = await h.http.post("/api/prs", json={"pr": f"{other}#{pr.number}"},
                                  headers={"Authorization": "Bearer api-token"})
        assert r.status_code == 201, r.text
        assert fault.hits == 1
        (line,) = [line for line in logs if line["event"] == "github.malformed"]
        assert line["request"] == f"GET /repos/{other}/contents/.github/convergebot.toml"
        assert "content is not base64" in line["why"]
        assert (await h.view(f"{other}#{pr.number}")).pr.max_rounds == h.rt.config.convergence.max_rounds
        assert _tracebacks(logs, caplog.records) == []

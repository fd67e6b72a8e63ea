import io
import json

import structlog

from bot.logs import configure_logging


def test_json_lines_carry_bound_keys_and_never_secrets():
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    log = structlog.get_logger("t")
    structlog.contextvars.bind_contextvars(pr_key="acme/w#1", process_key="run-1")
    try:
        log.info("pr.enrolled", token="ghp_supersecret", webhook_secret="s3cret", round=2)

        def explode(token="ghp_in_a_frame_local"):
            raise RuntimeError("boom")

        try:
            explode()
        except RuntimeError:
            log.exception("job.error")
    finally:
        structlog.contextvars.clear_contextvars()
    text = out.getvalue()
    assert "ghp_supersecret" not in text and "s3cret" not in text
    assert "ghp_in_a_frame_local" not in text
    first, second = (json.loads(line) for line in text.splitlines())
    assert (first["event"], first["pr_key"], first["process_key"], first["round"]) == (
        "pr.enrolled", "acme/w#1", "run-1", 2)
    assert first["token"] == "***" and first["level"] == "info"
    assert second["event"] == "job.error" and "RuntimeError" in json.dumps(second["exception"])


def test_enabled_answers_as_the_configured_level_filters():
    """A hot path asks `enabled` before it logs; it must say what the logger would write."""
    import logging

    from bot.logs import enabled

    for level in ("warning", "info", "debug"):
        out = io.StringIO()
        configure_logging(level, "json", stream=out)
        log = structlog.get_logger("t")
        for name in ("debug", "info", "warning"):
            getattr(log, name)(f"line.{name}")
        written = {json.loads(line)["event"] for line in out.getvalue().splitlines()}
        for name in ("debug", "info", "warning"):
            assert enabled(getattr(logging, name.upper())) == (f"line.{name}" in written), (level, name)
    configure_logging("info", "json", stream=io.StringIO())

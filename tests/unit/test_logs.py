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


def test_an_errors_token_and_credentialed_url_are_hidden_from_its_line():
    """A git or GitHub failure's text may carry the token git was given; the line keeps the
    rest of it (the path, the status) for the operator."""
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    token = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
    structlog.get_logger("t").warning(
        "job.error", error=f"GitError: unable to access 'https://x-access-token:{token}@github.com/a/b.git/': 403 "
                           "in /srv/bot/clone", detail=f"Authorization: token {token}", pr_key="a/b#1")
    (line,) = (json.loads(text) for text in out.getvalue().splitlines())
    assert token not in out.getvalue() and "x-access-token" not in out.getvalue()
    assert line["error"] == "GitError: unable to access 'https://github.com/a/b.git/': 403 in /srv/bot/clone"
    assert line["detail"] == "Authorization: token ***" and line["pr_key"] == "a/b#1"


def test_a_traceback_s_exception_texts_hide_tokens_and_credentialed_urls():
    """`log.exception` renders each exception of the chain with its text (`str(e)`): a git or
    GitHub failure's text there passes the same filter as an `error=` value, for the library
    loggers' lines as for the bot's own."""
    import logging

    token = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
    url = f"https://x-access-token:{token}@github.com/acme/app.git"
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    try:
        try:
            raise OSError(f"git push {url} refused")
        except OSError as cause:
            raise RuntimeError(f"the push failed with token {token}") from cause
    except RuntimeError:
        structlog.get_logger("t").exception("fix.failed")
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    text = out.getvalue()
    assert token not in text and "x-access-token" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["event"] for line in lines] == ["fix.failed", "Exception in ASGI application"]
    for line in lines:
        values = [e["exc_value"] for e in line["exception"]]
        assert values == ["the push failed with token ***", "git push https://github.com/acme/app.git refused"]

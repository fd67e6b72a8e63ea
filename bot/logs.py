"""structlog JSON logging; secrets never reach a line."""

from __future__ import annotations

import functools
import logging
import sys

import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import EventDict, Processor, WrappedLogger

from bot.redact import hide_secrets

_SECRET_WORDS = ("token", "secret", "password", "private_key", "authorization")
# The keys a line carries an exception's text under (`error=str(e)`): such text may hold a token
# or a credentialed URL (git's, GitHub's), hidden from the value itself. Other values are the
# bot's own words, not scanned: a line costs no more than it did.
_TEXT_KEYS = frozenset({"error", "detail", "message"})


@functools.lru_cache(maxsize=4096)  # the same few dozen keys, line after line
def _secret(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _redact(_logger: WrappedLogger, _name: str, event: EventDict) -> EventDict:
    for key, value in event.items():
        if _secret(key):
            event[key] = "***"
        elif key in _TEXT_KEYS and isinstance(value, str):
            event[key] = hide_secrets(value)
    return event


def _redact_exceptions(_logger: WrappedLogger, _name: str, event: EventDict) -> EventDict:
    """After the traceback is rendered: each exception's text (`str(e)`, the chain's too) as an
    `error=` value is, without tokens or credentialed URLs (a git or GitHub failure's may hold
    the token git was given). Frames hold the source's lines, and no locals (`show_locals`)."""
    found = event.get("exception")
    if isinstance(found, list):
        for exc in found:
            if isinstance(exc, dict) and isinstance(exc.get("exc_value"), str):
                exc["exc_value"] = hide_secrets(exc["exc_value"])
    elif isinstance(found, str):
        event["exception"] = hide_secrets(found)
    return event


# The least level `configure_logging` lets through; structlog's own default lets every one.
_least = logging.NOTSET


def enabled(level: int) -> bool:
    """Whether a line at `level` (`logging.INFO`, ...) is written: a hot path's line at a level
    filtered out then costs nothing, where a call through a module's logger costs a bind
    (structlog's loggers are not cached, so that tests can configure them again)."""
    return level >= _least


def configure_logging(level: str = "info", fmt: str = "json", stream=None) -> None:
    """JSON lines on stderr, with whatever was bound by `bind_contextvars` (pr_key, ...)."""
    global _least
    stream = stream or sys.stderr
    _least = getattr(logging, level.upper())
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    # show_locals=False: frame locals would carry tokens and webhook secrets into the log.
    exceptions = structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))
    structlog.configure(
        processors=[*shared, exceptions, _redact_exceptions, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_least),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    # Library loggers (uvicorn, apscheduler, alembic) through the same JSON pipeline.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared, processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, exceptions,
                                              _redact_exceptions, renderer]
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(getattr(logging, level.upper()), logging.INFO))
    for noisy in ("alembic", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # httpx logs every request at info ("HTTP Request: GET …"): that is debug detail here, and
    # the command line's output would carry it.
    for http in ("httpx", "httpcore"):
        logging.getLogger(http).setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)


def get_logger(name: str | None = None):
    return structlog.get_logger(name)

"""What no one but the operator may see: tokens, credentials in URLs and this machine's paths.

A log line hides the secrets (`bot/logs.py`). A failure shown by the API or the dashboard (both
unauthenticated) is its kind and a short message without any of them; the log has the whole
text."""

from __future__ import annotations

import re

SHOWN_CHARS = 200  # of a failure's message

# GitHub's token formats (classic, fine-grained, installation, OAuth, refresh; the old 40-hex
# installation token), a JWT (the App's), and a credential (with a digit) after an HTTP auth scheme.
_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|v1\.[0-9a-f]{40}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"
    r"|(?i:\b(?:basic|bearer|token)\s+)(?=[A-Za-z+/=._~-]*\d)[A-Za-z0-9+/=._~-]{8,}")
# `scheme://user:password@host`, and a query's secret (`?access_token=...`, `&sig=...`).
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"]+@")
_QUERY_SECRET = re.compile(r"(?i)([?&](?:access_token|token|key|secret|password|sig|signature)=)[^&\s'\"]+")
# An absolute path of the machine (`/home/bot/...`, `~/x`, `C:\x`), but not an API route after
# its method (`GET /repos/...`) nor a URL's path (`github.com/acme`) nor a closing tag: a slash
# with no word, dot, colon, slash or `<` before it.
_PATH = re.compile(r"(?<![\w.:/~\\<-])(?:~?/|[A-Za-z]:\\)[\w.@+~%/\\-]*[\w.@+~%-]")
_ROUTE = re.compile(r"\b(?:GET|HEAD|POST|PUT|PATCH|DELETE) $")
# The exception's class as `format_exception_only` writes it: `bot.github.errors.Malformed: ...`.
_KIND = re.compile(r"([A-Za-z_][\w.]*\.)?([A-Z]\w*): (.*)", re.DOTALL)


def hide_secrets(text: str) -> str:
    """`text` without tokens or credentials in URLs (each `***`, a URL's user and password gone)."""
    text = _TOKENS.sub(lambda m: m[0][: m[0].find(" ") + 1] + "***" if " " in m[0] else "***", text)
    text = _USERINFO.sub(r"\1", text)
    return _QUERY_SECRET.sub(r"\1***", text)


def scrub(text: str) -> str:
    """`text` without tokens, credentials in URLs or the machine's paths (each `<path>`)."""
    text = hide_secrets(text)
    return _PATH.sub(lambda m: m[0] if _ROUTE.search(text, 0, m.start()) else "<path>", text)


def shown(failure: str | None) -> str | None:
    """A stored failure as the surfaces show it: `Kind: message` for an exception (the class
    without its module), on one line, scrubbed, at most SHOWN_CHARS of message; other text (a
    reason the bot wrote, "dry run: would have merged") scrubbed and cut alike."""
    if failure is None:
        return None
    kind, message = "", failure.strip()
    if (m := _KIND.fullmatch(message)) is not None:
        kind, message = f"{m[2]}: ", m[3]
    message = " ".join(scrub(message).split())
    if len(message) > SHOWN_CHARS:
        message = message[: SHOWN_CHARS - 1] + "…"
    return kind + message

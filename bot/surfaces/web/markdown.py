"""Stored Markdown (escalation questions and answers, round summaries, findings) made safe to
show: any of it may come from a stranger's review comment or an agent's output.

Raw HTML is escaped, not passed through; links keep only http, https and mailto targets (a
`javascript:` link stays as text); images are not rendered, so a page view fetches nothing a
comment chose.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markupsafe import Markup

SAFE_SCHEMES = ("http://", "https://", "mailto:")


class _SafeMarkdown(MarkdownIt):
    def validateLink(self, url: str) -> bool:  # markdown-it's name
        return url.strip().lower().startswith(SAFE_SCHEMES)


_md = _SafeMarkdown("commonmark", {"html": False}).disable("image")


def render(text: str | None) -> Markup:
    """HTML for `text`; safe to insert as is."""
    return Markup(_md.render(text or ""))

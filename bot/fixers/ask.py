"""Fixers that ask someone on the PR (pure): a cloud agent by mention, or the PR author.

They do no I/O: the verdict is `waiting` with the comment to post. The engine posts it (with its
own hidden dedup marker) and waits for a push to the branch.
"""

from __future__ import annotations

from bot.fixers.base import WAITING, FixRequest, Verdict
from bot.fixers.prompt import fenced, location

BODY_CAP = 1500  # per finding, so a comment stays far below GitHub's 65536-character limit


def render_request(req: FixRequest, addressee: str) -> str:
    """Markdown asking `addressee` to address the findings and push to the head branch."""
    lines = [
        f"{addressee} please address the following review findings on this pull request and "
        f"push the fixes to the branch `{req.head_branch}` (round {req.round_no}).",
        "",
    ]
    for n, finding in enumerate(req.findings, 1):
        by = f" (from {finding.author})" if finding.author else ""
        body = finding.body.strip()
        if len(body) > BODY_CAP:
            body = body[:BODY_CAP].rstrip() + " …"
        lines += [f"{n}. `{location(finding)}`{by}", "", _indent(fenced(_defuse(body))), ""]
    if not req.findings:
        lines += ["There are no open review threads; apply the answers below.", ""]
    if req.instructions:
        lines += ["**Maintainer answers to apply:**", ""]
        lines += [_indent(fenced(_defuse(t)), "- ", "  ") + "\n" for t in req.instructions]
    if req.prompt_append.strip():
        lines += ["**Notes from the repository:**", "", _defuse(req.prompt_append.strip()), ""]
    lines.append(
        "Reply on a thread if you disagree with a finding instead of changing the code for it."
    )
    return "\n".join(lines).rstrip() + "\n"


def _defuse(text: str) -> str:
    """Break `<!--` in quoted text: the bot finds its own comments by hidden `<!-- ... -->`
    markers, and a quoted review comment carrying one would pass for a comment already posted."""
    return text.replace("<!--", "<!\u200b--")


def _indent(text: str, first: str = "   ", rest: str = "   ") -> str:
    return "\n".join((first if i == 0 else rest) + line for i, line in enumerate(text.splitlines()))


class MentionFixer:
    """Asks a cloud coding agent (e.g. `@copilot`) that works on mention."""

    kind = "mention"

    def __init__(self, mention: str = "@copilot") -> None:
        mention = mention.strip()
        if not mention:
            raise ValueError("mention fixer: mention must not be blank")
        self.mention = mention if mention.startswith("@") else f"@{mention}"

    async def run(self, req: FixRequest) -> Verdict:
        return Verdict(
            status=WAITING,
            summary=f"asked {self.mention} to address {len(req.findings)} finding(s)",
            comment=render_request(req, self.mention),
        )


class AuthorFixer:
    """Asks the PR author to address the findings themselves."""

    kind = "author"

    async def run(self, req: FixRequest) -> Verdict:
        addressee = f"@{req.pr_author}" if req.pr_author else "PR author:"
        return Verdict(
            status=WAITING,
            summary=f"asked the author to address {len(req.findings)} finding(s)",
            comment=render_request(req, addressee),
        )

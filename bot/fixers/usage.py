"""What an agent's attempt cost: tokens, money and time, as its CLI reported them.

Claude Code and aider report a cost in dollars; codex, Gemini CLI and Copilot CLI report tokens
only, which `[fixer] usd_per_million_input_tokens` / `..._output_tokens` price (docs/fixers.md,
"Cost and time"). Wall time is the bot's own measure of the attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # as the CLI reported it; None: it reported none
    turns: int | None = None
    seconds: float = 0.0

    def priced(self, usd_per_million_input: float, usd_per_million_output: float) -> Usage:
        """The usage with a cost: the CLI's own where it gave one, else its tokens at the
        configured prices (none when no price is set)."""
        if self.cost_usd is not None or not (usd_per_million_input or usd_per_million_output):
            return self
        cost = (self.input_tokens * usd_per_million_input + self.output_tokens * usd_per_million_output) / 1e6
        return replace(self, cost_usd=round(cost, 6))

    def __add__(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        turns = [t for t in (self.turns, other.turns) if t is not None]
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     sum(costs) if costs else None, sum(turns) if turns else None,
                     self.seconds + other.seconds)

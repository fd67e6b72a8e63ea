"""What a chaos run does, drawn from its seed: the PRs (kind, reviews, dependencies), the kills.

Every random choice of a run comes from `random.Random(f"{seed}:<purpose>")`, so the same seed
gives the same PRs, the same fault decisions in the same order, and the same kill schedule.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from simulator import ReviewerScript, ReviewStep, ThreadSpec

REPO = "chaos/app"
COPILOT = "copilot-pull-request-reviewer[bot]"
MAINTAINER = "maint"
AUTHOR = "dev"
REVIEW_DELAY = 0.3

# converge: k rounds, the reviewer leaves threads k-1 times then approves.
# escalate: the fixer asks a question in round 1 until a maintainer answers it.
# husk: the fixer's first run in round 1 crashes (or hangs past the timeout); it is rerun.
# author_push: the author pushes while the round-1 fixer runs; the bot's push must be refused.
# dependent: `Depends-on:` an earlier PR; merges only after it.
KINDS = ("converge", "escalate", "husk", "author_push", "dependent")
WEIGHTS = (4, 2, 2, 2, 2)


@dataclass(frozen=True)
class PrPlan:
    number: int  # PRs are opened in order, so the n-th PR is #n
    kind: str
    threads: tuple[int, ...]  # threads per review, review by review; then it approves
    husk_mode: str | None = None  # "crash" or "hang"
    depends_on: int | None = None

    @property
    def head(self) -> str:
        return f"chaos/pr-{self.number}"

    @property
    def path(self) -> str:
        return f"chaos/pr{self.number}.txt"

    @property
    def key(self) -> str:
        return f"{REPO}#{self.number}"

    @property
    def answer_token(self) -> str:
        return f"CHAOS-ANSWER-{self.number}"

    @property
    def body(self) -> str:
        text = f"Chaos PR #{self.number}: {self.kind}."
        if self.depends_on is not None:
            text += f"\n\nDepends-on: {REPO}#{self.depends_on}"
        return text

    def reviewer(self) -> ReviewerScript:
        steps = [ReviewStep(threads=[ThreadSpec(path=self.path, line=1,
                                                body=f"chaos finding {i + 1} of review {r + 1}")
                                     for i in range(count)],
                            body=f"Copilot left {count} comment(s).", state="COMMENTED")
                 for r, count in enumerate(self.threads)]
        steps.append(ReviewStep(threads=[], body="Looks good.", state="APPROVED"))
        return ReviewerScript(steps=steps, login=COPILOT, delay=REVIEW_DELAY)


def make_plan(seed: int, n: int) -> list[PrPlan]:
    rng = random.Random(f"{seed}:plan")
    # Every kind at least once when there is room, the rest by weight, in a seeded order.
    kinds = list(KINDS[:n]) + rng.choices(KINDS, WEIGHTS, k=max(0, n - len(KINDS)))
    rng.shuffle(kinds)
    if kinds and kinds[0] == "dependent":  # the first PR has nothing to depend on
        swap = next((i for i, k in enumerate(kinds) if k != "dependent"), None)
        if swap is None:
            kinds[0] = "converge"
        else:
            kinds[0], kinds[swap] = kinds[swap], kinds[0]
    plans: list[PrPlan] = []
    for number, kind in enumerate(kinds, 1):
        if kind == "converge":
            plans.append(PrPlan(number, kind, tuple(rng.randint(1, 3)
                                                    for _ in range(rng.randint(0, 3)))))
        elif kind == "husk":
            plans.append(PrPlan(number, kind, (rng.randint(1, 2),),
                                husk_mode=rng.choice(("crash", "crash", "hang"))))
        elif kind == "dependent":
            # Half the time on the PR just before (chains form), else on any earlier one.
            on = number - 1 if rng.random() < 0.5 else rng.randint(1, number - 1)
            plans.append(PrPlan(number, kind, (1,) * rng.randint(0, 1), depends_on=on))
        else:  # escalate, author_push: one round of findings, then approval
            plans.append(PrPlan(number, kind, (1,)))
    return plans


def kill_schedule(seed: int, kills: int, window: float) -> list[tuple[float, float]]:
    """`kills` (offset seconds after enrollment, pause before the restart), at least 3 s apart."""
    rng = random.Random(f"{seed}:kills")
    offsets: list[float] = []
    for _ in range(kills):
        offsets.append(rng.uniform(2.0, window))
    offsets.sort()
    spaced: list[float] = []
    for t in offsets:
        spaced.append(max(t, spaced[-1] + 3.0) if spaced else t)
    return [(t, rng.uniform(0.2, 1.5)) for t in spaced]


def write_fixer_plan(path: Path, plans: list[PrPlan], signals: Path, *, hang_seconds: float,
                     push_wait_seconds: float) -> None:
    """The JSON the fixer script reads (tests/chaos/fixer.py)."""
    path.write_text(json.dumps({
        "repo": REPO,
        "signals": str(signals),
        "hang_seconds": hang_seconds,
        "push_wait_seconds": push_wait_seconds,
        "prs": {str(p.number): {**asdict(p), "path": p.path, "answer_token": p.answer_token}
                for p in plans},
    }, indent=2))

"""Seeded webhook delivery chaos: drop, duplicate, reorder and delay deliveries by rate.

Decided when the event is emitted, from its own `random.Random(seed)` (request chaos has
another), drawing the same four numbers per delivery whatever the outcome, so a run is
reproducible given the same seed and event order.
"""

from __future__ import annotations

from dataclasses import dataclass

from .chaos import SeededRun, check_rate
from .errors import Unprocessable


@dataclass
class WebhookChaosSettings:
    """What `Simulator.webhook_chaos` takes; rates are probabilities per delivery (0..1)."""

    seed: int
    drop_rate: float = 0.0  # recorded as dropped, never sent
    duplicate_rate: float = 0.0  # sent twice with the same delivery id
    reorder_rate: float = 0.0  # held, and sent right after the next delivery that is not
    reorder_window: float = 1.0  # a held delivery with nothing after it goes out after this
    delay_max: float = 0.0  # each delivery waits a random 0..delay_max seconds before sending

    def __post_init__(self) -> None:
        self.seed = int(self.seed)
        for name in ("drop_rate", "duplicate_rate", "reorder_rate"):
            setattr(self, name, check_rate(name, getattr(self, name)))
        self.reorder_window, self.delay_max = float(self.reorder_window), float(self.delay_max)
        if self.reorder_window < 0 or self.delay_max < 0:
            raise Unprocessable("reorder_window and delay_max must not be negative", "delay_max")

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class DeliveryChaos:
    drop: bool = False
    duplicate: bool = False
    reorder: bool = False
    delay: float = 0.0


class WebhookChaos(SeededRun[WebhookChaosSettings]):
    """The webhook chaos in force (None: off), its Random and what it did."""

    settings: WebhookChaosSettings | None

    def decide(self) -> DeliveryChaos | None:
        s = self.settings
        if s is None:
            return None
        self.seen += 1
        draw = self._random.random
        drop, duplicate, reorder, delay = draw(), draw(), draw(), draw()
        if drop < s.drop_rate:
            self.counts["dropped"] += 1
            return DeliveryChaos(drop=True)
        decision = DeliveryChaos(duplicate=duplicate < s.duplicate_rate,
                                 reorder=reorder < s.reorder_rate, delay=delay * s.delay_max)
        for kind, applied in (("duplicated", decision.duplicate),
                              ("reordered", decision.reorder), ("delayed", decision.delay > 0)):
            if applied:
                self.counts[kind] += 1
        return decision

    def to_dict(self) -> dict:
        return {"enabled": self.settings is not None,
                "settings": self.settings.to_dict() if self.settings else None,
                "counts": dict(self.counts), "deliveries": self.seen}

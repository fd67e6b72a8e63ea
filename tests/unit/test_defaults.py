"""A default said once: the rounds a run is given when nothing says otherwise, and what counts as
a PR's title."""

from __future__ import annotations

import pytest

from bot.config import ConvergenceConfig
from bot.engine.submit import SubmitOptions
from bot.rules.model import DEFAULT_MAX_ROUNDS, title_of
from storage.models import PullRequest


def test_the_round_cap_s_default_is_one_number_everywhere_it_is_written():
    # The row's own default (storage imports nothing of the bot) is the one copy; this ties it.
    assert ConvergenceConfig().max_rounds == SubmitOptions().max_rounds == DEFAULT_MAX_ROUNDS
    assert PullRequest.model_fields["max_rounds"].default == DEFAULT_MAX_ROUNDS


@pytest.mark.parametrize(("given", "shown"), [
    (None, None), ("", None), ("   ", None), ("\t\n", None), ("  Fix the parser ", "Fix the parser"),
])
def test_a_title_of_only_whitespace_counts_as_missing(given, shown):
    assert title_of(given) == shown

from datetime import UTC, datetime, timedelta, timezone

import pytest

from bot.github.stamps import parse_time


def test_github_stamps_are_aware_datetimes():
    assert parse_time("2026-11-30T05:21:03Z") == datetime(2026, 11, 30, 5, 21, 3, tzinfo=UTC)
    assert parse_time("2026-11-30T07:21:03+02:00") == datetime(2026, 11, 30, 7, 21, 3,
                                                               tzinfo=timezone(timedelta(hours=2)))


@pytest.mark.parametrize("text", [None, "", "yesterday", 1764480063, "2026-11-30T05:21:03"])
def test_a_missing_malformed_or_zoneless_stamp_is_none(text):
    assert parse_time(text) is None

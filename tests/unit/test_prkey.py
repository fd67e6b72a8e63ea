import pytest

from storage.keys import PrKey, PrKeyError, parse_pr_key, try_parse_pr_key


@pytest.mark.parametrize(
    "text,expected",
    [
        ("acme/widgets#12", PrKey("acme", "widgets", 12)),
        ("  Acme/Widgets#12 ", PrKey("acme", "widgets", 12)),
        ("a-b/c.d_e#1", PrKey("a-b", "c.d_e", 1)),
        ("https://github.com/acme/widgets/pull/7", PrKey("acme", "widgets", 7)),
        ("https://ghe.example.com/acme/widgets/pull/7/", PrKey("acme", "widgets", 7)),
    ],
)
def test_parses_canonical_keys(text, expected):
    assert parse_pr_key(text) == expected
    assert str(parse_pr_key(text)) == f"{expected.owner}/{expected.repo}#{expected.number}"


@pytest.mark.parametrize(
    "text",
    ["", "acme/widgets", "acme/widgets#", "acme/widgets#0", "acme/widgets#-1", "acme#1",
     "acme/wid gets#1", "-acme/w#1", "acme/../#1", "acme/..#1", "acme/w#1#2", "acme/w#12345678901",
     "a/b/c#1", "acme/w#1x"],
)
def test_malformed_keys_raise_a_clear_error(text):
    with pytest.raises(PrKeyError, match="expected owner/repo#N"):
        parse_pr_key(text)
    assert try_parse_pr_key(text) is None


def test_non_strings_never_crash_a_handler():
    assert try_parse_pr_key(None) is None
    assert try_parse_pr_key(12) is None
    assert try_parse_pr_key({"pr": 1}) is None

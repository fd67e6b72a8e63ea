"""Links the dashboard and the API draw from stored text."""

from bot.surfaces.views import comment_url


def test_a_comment_link_is_drawn_only_from_an_http_pr_url():
    assert comment_url("https://github.com/o/r/pull/1", 7) == "https://github.com/o/r/pull/1#issuecomment-7"
    assert comment_url("javascript:alert(1)//", 7) is None
    assert comment_url(" data:text/html,x", 7) is None
    assert comment_url("https://github.com/o/r/pull/1", None) is None

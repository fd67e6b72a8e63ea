"""The webhook-latency bookkeeping stays bounded: PRs woken here whose job never runs here."""

from bot import metrics


def test_the_woken_prs_are_bounded_oldest_out(monkeypatch):
    monkeypatch.setattr(metrics, "_woken", {})
    monkeypatch.setattr(metrics, "WOKEN_MAX", 3)
    metrics.webhook_woke(["o/r#1", "o/r#2"])
    metrics.webhook_woke(["o/r#3", "o/r#4", None, "o/r#5"])
    assert sorted(metrics._woken) == ["o/r#3", "o/r#4", "o/r#5"]

"""The GitHub App manifest and its docs page against the code: an App created from a drifted
manifest would miss events the router acts on, or ask for permissions the docs never justify."""

import json
import re
from pathlib import Path

import pytest

from bot.intake.routing import SUBSCRIBED_EVENTS, UNSUBSCRIBED_EVENTS, route

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((ROOT / "docs" / "github-app-manifest.json").read_text())
PAGE = (ROOT / "docs" / "github-app.md").read_text()


def _table_row(name: str) -> str:
    """The docs table row naming `name` in backticks."""
    rows = [line for line in PAGE.splitlines() if line.startswith("|") and f"`{name}`" in line]
    assert rows, f"docs/github-app.md has no table row naming `{name}`"
    return rows[0]


def test_the_manifest_subscribes_to_exactly_the_events_the_router_handles():
    assert set(MANIFEST["default_events"]) == SUBSCRIBED_EVENTS
    assert len(MANIFEST["default_events"]) == len(SUBSCRIBED_EVENTS)


@pytest.mark.parametrize("event", sorted(SUBSCRIBED_EVENTS))
def test_each_subscribed_event_is_routed_and_documented(event):
    assert not route(event, {}, "d").reason.startswith("unhandled event")
    _table_row(event)


def test_events_github_sends_unasked_are_not_subscribed():
    assert not UNSUBSCRIBED_EVENTS & SUBSCRIBED_EVENTS


@pytest.mark.parametrize("permission", sorted(MANIFEST["default_permissions"]))
def test_each_permission_is_documented_with_its_access(permission):
    access = MANIFEST["default_permissions"][permission]
    cells = [cell.strip() for cell in _table_row(permission).strip("|").split("|")]
    assert cells[2] == {"read": "read", "write": "read & write"}[access], cells


def test_the_docs_table_asks_for_nothing_the_manifest_lacks():
    table = PAGE.split("## Permissions", 1)[1].split("\n## ", 1)[0]
    keys = set(re.findall(r"^\|[^|]+\| `([a-z_]+)` \|", table, re.MULTILINE))
    assert keys == set(MANIFEST["default_permissions"])


def test_the_manifest_never_asks_for_workflows():
    assert "workflows" not in MANIFEST["default_permissions"]


def test_the_webhook_points_at_the_bots_endpoint():
    assert MANIFEST["hook_attributes"]["url"].endswith("/webhook")
    assert MANIFEST["hook_attributes"].get("active", True) is True
    assert MANIFEST["public"] is False


def test_security_links_the_permissions_page():
    assert "docs/github-app.md" in (ROOT / "SECURITY.md").read_text()

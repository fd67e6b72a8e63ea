"""A fake model API on localhost that the real agent CLIs talk to (tests/agents/fakemodel/server.py)."""

from .server import Edit, FakeModel, Plan, Step, serve_in_thread

__all__ = ["Edit", "FakeModel", "Plan", "Step", "serve_in_thread"]

"""GitHub's REST JSON shapes, rendered from simulator records (shared by REST and webhooks)."""

from .context import RenderContext

__all__ = ["RenderContext"]

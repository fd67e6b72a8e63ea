"""The HTTP app: API, dashboard, health and metrics; the webhook endpoint is intake's."""

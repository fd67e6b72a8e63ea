"""Surfaces: what people and programs use. `serve` (the long-running process: workers, periodic
duties and the HTTP server), the CLI, the web app (webhook endpoint mounted from intake, the API,
the dashboard, health), the views they share, the doctor and the demo. Nothing imports them but
`bot/__main__.py`."""

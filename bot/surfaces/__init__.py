"""Surfaces: what people and programs use. The CLI, the web app (webhook endpoint mounted from
intake, the API, the dashboard, health), the views they share, the doctor and the demo. They
read storage and call intake or the engine; nothing below imports them."""

"""HTTP surfaces: /webhook, health, metrics, the API."""

"""One module per model API the CLIs speak; each exposes `routes(model) -> list[Route]`.

The server mounts every module here that has `routes` (tests/agents/fakemodel/server.py)."""

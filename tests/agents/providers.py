"""How each real CLI is pointed at the fake model server instead of its vendor's API, with no
login: the environment and the extra flags (`[fixer] preset_args`) a user would set for a model
of their own (docs/fixers.md, "Proven against the real CLIs")."""

from __future__ import annotations

from pathlib import Path

KEY = "fake-key-for-the-local-model"


def provider(preset: str, base_url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    """(environment, preset_args) for `preset` talking to the fake model at `base_url`."""
    if preset == "claude-code":
        return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": KEY}, []
    if preset == "codex":
        table = (f'{{name="fake", base_url="{base_url}/v1", env_key="FAKE_MODEL_API_KEY", '
                 'wire_api="responses"}')
        return {"FAKE_MODEL_API_KEY": KEY}, ["-c", "model_provider=fake", "-c", f"model_providers.fake={table}",
                                            "-m", "gpt-5-codex"]
    if preset == "gemini":
        return {"GEMINI_API_KEY": KEY, "GOOGLE_GEMINI_BASE_URL": base_url}, []
    if preset == "copilot":
        return {"COPILOT_PROVIDER_BASE_URL": f"{base_url}/v1", "COPILOT_PROVIDER_API_KEY": KEY,
                "COPILOT_OFFLINE": "true"}, []
    if preset == "aider":
        return {"OPENAI_API_KEY": KEY, "OPENAI_API_BASE": f"{base_url}/v1"}, ["--model", "openai/fake-model"]
    raise ValueError(preset)

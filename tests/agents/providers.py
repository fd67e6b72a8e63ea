"""How each real CLI is pointed at the fake model server instead of its vendor's API, with no
login: the environment and the extra flags (`[fixer] preset_args`) a user would set for a model
of their own (docs/fixers.md, "Proven against the real CLIs")."""

from __future__ import annotations

import json
from pathlib import Path

KEY = "fake-key-for-the-local-model"


def provider(preset: str, base_url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    """(environment, preset_args) for `preset` talking to the fake model at `base_url`."""
    if preset == "claude-code":
        return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": KEY}, []
    if preset == "codex":
        table = (f'{{name="fake", base_url="{base_url}/v1", env_key="FAKE_MODEL_API_KEY", '
                 'wire_api="responses"}')
        # A model codex knows (it offers its apply_patch tool only to those).
        return {"FAKE_MODEL_API_KEY": KEY}, ["-c", "model_provider=fake", "-c", f"model_providers.fake={table}",
                                            "-m", "gpt-5.5"]
    if preset == "gemini":
        # A base URL alone selects "gateway" auth, which headless mode refuses (exit 41): the
        # key's auth is named in the user's settings, beside what turns off its calls home.
        settings = home / ".gemini" / "settings.json"
        settings.parent.mkdir(exist_ok=True)
        settings.write_text(json.dumps({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}}))
        return {"GEMINI_API_KEY": KEY, "GOOGLE_GEMINI_BASE_URL": base_url}, []
    if preset == "copilot":
        # A model provider of one's own needs a model named; offline, no GitHub login is asked.
        return {"COPILOT_PROVIDER_BASE_URL": f"{base_url}/v1", "COPILOT_MODEL": "gpt-4.1",
                "COPILOT_OFFLINE": "true"}, []
    if preset == "aider":
        # A model litellm does not know is priced by a metadata file, read inside the sandbox:
        # kept in aider's own state directory, which the sandbox shows.
        metadata = home / ".aider" / "model-metadata.json"
        metadata.parent.mkdir(exist_ok=True)
        metadata.write_text(json.dumps({"openai/fake-model": {
            "max_tokens": 8192, "max_input_tokens": 128000, "max_output_tokens": 8192,
            "input_cost_per_token": 0.000003, "output_cost_per_token": 0.000015,
            "litellm_provider": "openai", "mode": "chat"}}))
        return ({"OPENAI_API_KEY": KEY, "OPENAI_API_BASE": f"{base_url}/v1"},
                ["--model", "openai/fake-model", "--edit-format", "diff", "--model-metadata-file", str(metadata)])
    raise ValueError(preset)

"""A stateful fake GitHub (REST + GraphQL subset, real git branches, signed webhooks).

In: a directory for its bare git repositories and its options (tokens, rate limit, where
webhooks go); then operations called from Python, HTTP requests (GitHub's REST and GraphQL, the
control API under /_sim/) and real `git push`es. Out: GitHub's answers, signed webhook deliveries,
and what tests assert on (side effects, counters, deliveries, branch moves). It imports nothing of
the bot. Its model, `Simulator`, knows neither HTTP nor scenario files: `build_app(sim)` is its
web face, `apply_scenario(sim, scenario)` creates a scenario's repositories and PRs in it, and
`SimulatorServer` does both when it starts. See docs/simulator.md. Typical use::

    sim = Simulator(root=tmp_path)
    async with SimulatorServer(sim, load_scenario("demo.toml")) as server:
        ...  # point githubkit at server.url
"""

from pathlib import Path

from .app import build_app
from .chaos import ChaosSettings
from .faults import Fault
from .scenario import Scenario, ScenarioError, apply_scenario, load_scenario, parse_scenario
from .server import AsgiServer, SimulatorServer, run_simulator
from .simulator import Simulator
from .state import COPILOT_LOGIN, ReviewerScript, ReviewStep, ThreadSpec
from .webhook_chaos import WebhookChaosSettings
from .webhooks import Delivery, WebhookFaults, signature

DEMO_SCENARIO = Path(__file__).parent / "scenarios" / "demo.toml"

__all__ = [
    "AsgiServer", "COPILOT_LOGIN", "ChaosSettings", "DEMO_SCENARIO", "Delivery", "Fault",
    "ReviewStep", "ReviewerScript", "Scenario", "ScenarioError", "Simulator", "SimulatorServer",
    "ThreadSpec", "WebhookChaosSettings", "WebhookFaults", "apply_scenario", "build_app",
    "load_scenario", "parse_scenario", "run_simulator", "signature",
]

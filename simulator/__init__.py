"""A stateful fake GitHub (REST + GraphQL subset, real git branches, signed webhooks).

See docs/simulator.md. Typical use::

    sim = Simulator(load_scenario("demo.toml"), root=tmp_path)
    async with SimulatorServer(sim) as server:
        ...  # point githubkit at server.url
"""

from pathlib import Path

from .chaos import ChaosSettings
from .faults import Fault
from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from .server import AsgiServer, SimulatorServer, run_simulator
from .simulator import Simulator
from .state import COPILOT_LOGIN, ReviewerScript, ReviewStep, ThreadSpec
from .webhook_chaos import WebhookChaosSettings
from .webhooks import Delivery, WebhookFaults, signature

DEMO_SCENARIO = Path(__file__).parent / "scenarios" / "demo.toml"

__all__ = [
    "AsgiServer", "COPILOT_LOGIN", "ChaosSettings", "DEMO_SCENARIO", "Delivery", "Fault",
    "ReviewStep", "ReviewerScript", "Scenario", "ScenarioError", "Simulator", "SimulatorServer",
    "ThreadSpec", "WebhookChaosSettings", "WebhookFaults", "load_scenario", "parse_scenario",
    "run_simulator", "signature",
]

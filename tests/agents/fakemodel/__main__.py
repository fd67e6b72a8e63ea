"""`python -m tests.agents.fakemodel --port N --plan plan.json [--log requests.jsonl]`."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from .server import FakeModel, Plan, serve_in_thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()
    model = FakeModel(Plan.from_json(json.loads(args.plan.read_text())), log_path=args.log)
    url, stop = serve_in_thread(model, args.port)
    print(url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        stop()


if __name__ == "__main__":
    main()

"""The chaos suite's command fixer: `python fixer.py PLAN.json`, run by the bot in a fresh clone.

Standard library only. It reads the plan (PR number -> kind) and the findings file the bot wrote,
and behaves as its PR's kind says:

- every kind, normally: append one line per finding to the finding's file (and one to the PR's
  own file), then print the verdict line with every thread "fixed". The bot commits and pushes.
- escalate: in round 1, until the maintainer's answer (its token) is among the instructions,
  print a `needs_input` verdict with a question and change nothing.
- husk: the first run in round 1 (a marker file remembers it) crashes without a verdict, or
  hangs past the bot's fixer timeout; later runs behave normally.
- author_push: the first run in round 1 signals the test (`ready-N`) and waits (bounded) for it
  to push to the branch (`pushed-N`), so the bot's own push comes after the author's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text())
    number = os.environ["CONVERGEBOT_PR_KEY"].rsplit("#", 1)[1]
    round_no = int(os.environ["CONVERGEBOT_ROUND"])
    attempt = int(os.environ["CONVERGEBOT_ATTEMPT"])
    findings_doc = json.loads(Path(os.environ["CONVERGEBOT_FINDINGS_FILE"]).read_text())
    pr = plan["prs"].get(number, {"kind": "converge", "path": f"chaos/pr{number}.txt"})
    signals = Path(plan["signals"])
    kind = pr["kind"]
    where = f"#{number} round {round_no} attempt {attempt}"

    if kind == "escalate" and round_no == 1:
        instructions = json.dumps(findings_doc.get("instructions") or [])
        if pr["answer_token"] not in instructions:
            print(f"chaos fixer {where}: asking", file=sys.stderr)
            print(json.dumps({"status": "needs_input", "summary": "Needs a decision.",
                              "question": f"Should PR {number} keep its public name?"}))
            return 0

    if kind == "husk" and round_no == 1 and _first(signals / f"husked-{number}"):
        if pr.get("husk_mode") == "hang":
            print(f"chaos fixer {where}: hanging", file=sys.stderr, flush=True)
            time.sleep(plan["hang_seconds"])  # past the bot's timeout; bounded for orphans
            return 0
        print(f"chaos fixer {where}: crashing", file=sys.stderr)
        return 3

    if kind == "author_push" and round_no == 1 and not (signals / f"pushed-{number}").exists():
        (signals / f"ready-{number}").write_text(where)
        deadline = time.monotonic() + plan["push_wait_seconds"]
        while not (signals / f"pushed-{number}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    threads = []
    lines: dict[str, list[str]] = {pr["path"]: [f"chaos fix {where}"]}
    for f in findings_doc.get("findings") or []:
        path = f.get("path") or pr["path"]
        lines.setdefault(path, []).append(f"fixed {f.get('thread_id')} in {where}")
        if f.get("thread_id"):
            threads.append({"id": f["thread_id"], "action": "fixed", "reason": f"edited {path}"})
    for path, added in lines.items():
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in added))
    print(json.dumps({"status": "addressed", "summary": f"Edited {len(lines)} file(s) for {where}.",
                      "threads": threads}))
    return 0


def _first(marker: Path) -> bool:
    """True exactly once per marker file (O_EXCL), across bot restarts and reruns."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


if __name__ == "__main__":
    raise SystemExit(main())

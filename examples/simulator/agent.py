#!/usr/bin/env python3
"""A stand-in coding agent for trying `convergebot serve` against the simulator.

It does what the command fixer's contract asks (docs/fixers.md) and nothing clever: for each
finding it appends a line to NOTES.md in the clone (the bot commits and pushes what it leaves),
answers every review thread "fixed", and prints its verdict as the last JSON line on stdout.
Put a real agent CLI in `[fixer] command` instead.
"""

import json
import os

work = json.load(open(os.environ["CONVERGEBOT_FINDINGS_FILE"], encoding="utf-8"))
with open("NOTES.md", "a", encoding="utf-8") as notes:
    for f in work["findings"]:
        notes.write(f"- {f['path'] or 'general'}:{f['line'] or ''} {f['body']}\n")
threads = [{"id": f["thread_id"], "action": "fixed", "reason": "Noted in NOTES.md."}
           for f in work["findings"] if f["thread_id"]]
print("stand-in agent: read", len(work["findings"]), "finding(s)")  # any output before the verdict is fine
print(json.dumps({"status": "addressed", "summary": "Noted each finding in NOTES.md.",
                  "threads": threads}))

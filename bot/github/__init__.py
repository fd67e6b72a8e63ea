"""Everything that crosses GitHub: the one client wrapper (transport policy, endpoints, HTTP
cache, installations, rate budget) and its errors."""

# The client's and its facades' methods that write to GitHub. The effects make them, each safe
# to repeat; the intake's redelivery asks GitHub to send a lost delivery again (a write of no
# PR's). tests/unit/test_import_graph.py keeps them in the effects; scripts/guards.py --report
# reads the conditions tested before them.
WRITES = frozenset({"comment_once", "react", "request_review", "write_threads", "create_check_run",
                    "update_check_run", "enqueue", "merge", "update_branch", "retarget", "redeliver"})

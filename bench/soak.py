"""A soak: PRs enrolled at a steady rate for a long run, faults on, and the bot's memory sampled.

The question is whether the bot's resident memory levels off once its caches and maps are full
(the HTTP cache by bytes, every in-process map by count or by the PRs still driven), or keeps
growing with every PR it has seen.

Set-up as bench/scale.py's (its simulator child, one repository per PR or `--repos N` shared,
three rounds each: two reviews with a finding, the scripted fixer's fix, a clean review, the
merge), with request chaos on: a share of GitHub's answers are 5xx, and some writes are made and
then answered 502. With one repository per PR, what the bot keeps per repository (the scan's
listings in the HTTP cache, the repositories' config files) grows with the PRs too; an
organisation has a bounded set of repositories and an unbounded stream of PRs, which `--repos`
models.

The N PRs are enrolled one by one, spread evenly over the first 80% of `--minutes`; the rest of
the run lets the last ones finish. Every `--every` seconds the bench samples this process's RSS
(the bot's stack runs here; the simulator is a child) and the PRs merged so far, and at the end
prints the samples and the growth of RSS per third of the run: a bot whose memory levels off
grows far less in the last third than in the first, though as many PRs pass through it.

    .venv/bin/python bench/soak.py --prs 1000 --minutes 30 [--repos 50] [--error-rate 0.02] [--lost-ack-rate 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import ctypes
import gc
import inspect
import sys
import tempfile
import time
import tracemalloc
import types
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scale import simulator

from bot.config import GitHubConfig, JobsConfig
from bot.fixers import ScriptedFixer
from bot.github.client import http_cache_sizes
from bot.logs import configure_logging
from tests.e2e.harness import bot_config
from tests.serving import WEBHOOK_SECRET, serving


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def heap_mb() -> tuple[float, float]:
    """glibc's heap: (in use, free but kept), in MB, from mallinfo2 (0, 0 where there is none).
    RSS that grows with `free but kept` is memory given back to malloc and not to the system."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return 0.0, 0.0
    return (info.uordblks + info.hblkhd) / 2**20, info.fordblks / 2**20


def mappings_kb() -> dict[str, int]:
    """This process's resident memory by mapping (its file, or [heap], [stack], anonymous), in KB."""
    sizes: dict[str, int] = {}
    name = "?"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else "[anonymous]"
        elif head and head[0] == "Rss:":
            sizes[name] = sizes.get(name, 0) + int(head[1])
    return sizes


def type_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        if inspect.iscoroutine(obj) or inspect.isasyncgen(obj):  # by what it runs: a task left behind?
            code = getattr(obj, "cr_code", None) or getattr(obj, "ag_code", None)
            name += f" {code.co_qualname if code else '?'}"
        counts[name] = counts.get(name, 0) + 1
    return counts


def _owner(obj: object) -> str:
    """What an object that holds a context or a cell is, by what it runs."""
    kind = type(obj).__qualname__
    if isinstance(obj, asyncio.Task):
        coro = obj.get_coro()
        code = getattr(coro, "cr_code", None)
        return f"Task {code.co_qualname if code else '?'}"
    if isinstance(obj, asyncio.Handle):
        callback = getattr(obj, "_callback", None)
        name = getattr(callback, "__qualname__", None) or type(callback).__qualname__
        return f"{kind} {name}{' (cancelled)' if obj.cancelled() else ''}"
    if inspect.isfunction(obj):
        return f"function {obj.__qualname__}"
    if inspect.iscoroutine(obj) or inspect.isasyncgen(obj):
        code = getattr(obj, "cr_code", None) or getattr(obj, "ag_code", None)
        return f"{kind} {code.co_qualname if code else '?'}"
    return f"{type(obj).__module__}.{kind}"


def owners(*kinds: type) -> dict[str, int]:
    """Who holds the live objects of these kinds (contexts, closure cells), counted by `_owner`:
    one pass over every gc-tracked object's referents."""
    wanted = {id(o): type(o).__qualname__ for o in gc.get_objects() if isinstance(o, kinds)}
    counts: dict[str, int] = {}
    closures = {id(f.__closure__): f for f in gc.get_objects() if inspect.isfunction(f) and f.__closure__}
    for holder in gc.get_objects():
        held = [wanted[id(r)] for r in gc.get_referents(holder) if id(r) in wanted]
        if held:
            owner = closures.get(id(holder), holder)  # a closure's cells: its function's, not its tuple's
            for kind in set(held):
                name = f"{kind} held by {_owner(owner)}"
                counts[name] = counts.get(name, 0) + held.count(kind)
    return counts


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def run(args) -> int:
    configure_logging("warning", "json")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        db_url = f"sqlite:///{tmp_path / 'soak.db'}"
        say(f"opening {args.prs} PRs, " + (f"over {args.repos} repositories" if args.repos else "one repository each")
            + " ...")
        async with simulator(tmp_path, args) as (url, keys, gh):
            config = bot_config(db_url, url, poller={"interval_seconds": 60, "jitter_seconds": 0},
                                convergence={"review_wait_timeout_seconds": 3600, "nudge_window_seconds": 1800},
                                jobs={"idle_poll_seconds": 1.0, "backoff_base_seconds": 2.0, "backoff_cap_seconds": 60.0,
                                      "workers": JobsConfig().workers, "fixer_workers": JobsConfig().fixer_workers},
                                github={"check_run_settle_seconds": GitHubConfig().check_run_settle_seconds,
                                        "http_cache_idle_minutes": args.cache_idle_minutes})
            async with serving(config, fixer=ScriptedFixer(["push"])) as (rt, http):
                await gh.call("PUT", "_sim/webhooks", {"url": f"{http.base_url}/webhook", "secret": WEBHOOK_SECRET,
                                                       "senders": 8})
                # Chaos spares the simulator's own control routes (the bench's comments).
                await gh.call("PUT", "_sim/chaos", {"seed": 7, "error_rate": args.error_rate,
                                                    "lost_ack_rate": args.lost_ack_rate, "exclude": ["^/_sim"]})
                merged_count = text("SELECT count(*) FROM pull_requests WHERE status = 'merged'")
                total = args.minutes * 60
                spacing = total * 0.8 / max(1, len(keys))
                samples: list[tuple[float, int, int, float]] = []  # (seconds, enrolled, merged, RSS MB)
                t0 = time.monotonic()
                if args.trace:
                    tracemalloc.start(8)
                base = None
                first_look: tuple[dict[str, int], dict[str, int], dict[str, int]] | None = None

                async def enroll() -> None:
                    for i, (repo, number) in enumerate(keys):
                        await asyncio.sleep(max(0.0, t0 + i * spacing - time.monotonic()))
                        await gh.comment(repo, number, "/converge", user="maint")
                        enrolled[0] = i + 1

                enrolled = [0]
                feeder = asyncio.create_task(enroll())
                try:
                    while (now := time.monotonic() - t0) < total:
                        async with rt.db.read_session() as r:
                            merged = (await r.exec(merged_count)).one()[0]
                        samples.append((now, enrolled[0], merged, rss_mb()))
                        if args.trace and base is None and now > total * 0.2:
                            base = tracemalloc.take_snapshot()
                        if args.anatomy and first_look is None and now > total * 0.2:
                            first_look = (mappings_kb(), type_counts(), owners(contextvars.Context, types.CellType))
                        used, kept = heap_mb()
                        answers, cached = http_cache_sizes(rt.github.gh)
                        say(f"  {now / 60:5.1f} min: {enrolled[0]} enrolled, {merged} merged, RSS {samples[-1][3]:.0f} MB"
                            f" (HTTP cache: {answers} answers, {cached / 2**20:.1f} MB; "
                            f"malloc: {used:.0f} MB in use, {kept:.0f} MB free but kept; Python: "
                            f"{sys.getallocatedblocks() / 1e6:.2f} M blocks, {len(gc.get_objects()) / 1e6:.2f} M objects)")
                        await asyncio.sleep(args.every)
                finally:
                    feeder.cancel()
                if args.trace and base is not None:
                    grown = tracemalloc.take_snapshot().compare_to(base, "traceback")
                    print("what grew since a fifth of the run (tracemalloc, top 12):")
                    for stat in grown[:12]:
                        print(f"  {stat.size_diff / 1e6:+.1f} MB in {stat.count_diff:+d} blocks")
                        for line in stat.traceback.format()[-8:]:
                            print("     " + line)
                if args.anatomy and first_look is not None:
                    _print_growth("resident memory by mapping (KB)", first_look[0], mappings_kb())
                    _print_growth("live objects by type (gc-tracked)", first_look[1], type_counts())
                    _print_growth("contexts and closure cells by holder", first_look[2],
                                  owners(contextvars.Context, types.CellType))
                counts = (await gh.call("GET", "_sim/chaos")).get("counts", {})
                await gh.call("DELETE", "_sim/chaos")
    thirds = [samples[len(samples) * k // 3] for k in range(3)] + [samples[-1]]
    print(f"soak: {args.prs} PRs in {args.repos or args.prs} repositories, enrolled over {args.minutes * 0.8:.0f} min of {args.minutes} min, "
          f"HTTP cache idle age {args.cache_idle_minutes:g} min, "
          f"chaos {args.error_rate:.0%} errors and {args.lost_ack_rate:.0%} lost answers "
          f"(applied: {dict(counts)}), SQLite, sampled every {args.every:.0f} s")
    print(f"merged {samples[-1][2]}/{args.prs}; RSS {samples[0][3]:.0f} MB at the start, "
          f"{max(s[3] for s in samples):.0f} MB at most, {samples[-1][3]:.0f} MB at the end")
    for k in range(3):
        (t_a, _, m_a, r_a), (t_b, _, m_b, r_b) = thirds[k], thirds[k + 1]
        per = (r_b - r_a) * 1024 / max(1, m_b - m_a)
        print(f"third {k + 1} ({t_a / 60:.0f}-{t_b / 60:.0f} min): RSS {r_a:.0f} -> {r_b:.0f} MB "
              f"({r_b - r_a:+.0f} MB), {m_b - m_a} PRs merged, {per:+.1f} KB per PR merged")
    first = thirds[1][3] - thirds[0][3]
    last = thirds[3][3] - thirds[2][3]
    print(f"growth in the last third / the first: {last / first if first > 0 else float('nan'):.2f} "
          f"(levels off: well under 1)")
    return 0


def _print_growth(what: str, before: dict[str, int], after: dict[str, int]) -> None:
    grown = sorted(((after.get(k, 0) - before.get(k, 0), k) for k in set(before) | set(after)), reverse=True)
    print(f"what grew since a fifth of the run: {what}, top 15")
    for size, name in grown[:15]:
        print(f"  {size:+10d}  {name}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prs", type=int, default=1000)
    p.add_argument("--repos", type=int, default=0,
                   help="spread the PRs over this many repositories (0: a repository each, as bench/scale.py)")
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--error-rate", type=float, default=0.02, help="share of GitHub answers that are 5xx")
    p.add_argument("--lost-ack-rate", type=float, default=0.01, help="share of writes made and answered 502")
    p.add_argument("--trace", action="store_true",
                   help="tracemalloc: print what grew from a fifth of the run to its end (slows the bot)")
    p.add_argument("--cache-idle-minutes", type=float, default=GitHubConfig().http_cache_idle_minutes,
                   help="[github] http_cache_idle_minutes: a run shorter than a few of these never sees "
                        "the cache's answers age out")
    p.add_argument("--anatomy", action="store_true",
                   help="print what grew from a fifth of the run to its end: resident memory by mapping and "
                        "live objects by type")
    args = p.parse_args()
    # What bench/scale.py's simulator child reads.
    args.in_process, args.limit, args.window = False, 0, 3600
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())

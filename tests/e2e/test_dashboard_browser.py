"""The dashboard in a real browser: headless Chromium, through Selenium, against the demo's
state (the real bot ran the demo's five PRs on the simulator into this test's database; one
escalated and a maintainer answered it), served on a real localhost port.

It opens the list, filters it (by repository, by status, and to what has waited long), opens
the escalated PR's page, follows what the page shows of its rounds and its escalation (whose
link must be the GitHub comment the bot posted), and saves screenshots under test-artifacts/.
Skipped only where no Chromium is installed and CI is not set: in CI a missing browser fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from bot.fixers import ScriptedFixer
from bot.surfaces import demo
from bot.surfaces.serve import running
from simulator import Simulator, SimulatorServer
from storage import escalations, prs
from storage.database import Database
from storage.models import PullRequest, utcnow

from ..helpers import enroll
from ..serving import make_config, serving

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WAIT = 20  # seconds any page state may take to appear
OTHER = "acme/gadgets#7"  # a PR in another repository, still converging: what the filters take out
# Another, waiting for a review for two days: longer than `[dashboard] stale_after_seconds` (a
# day), where OTHER has waited moments and the demo's merged PRs wait on nothing.
STALE = "acme/gadgets#8"


def _browser_or_skip() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must have a browser for this test: missing {', '.join(missing)}")
    if missing:
        pytest.skip(f"no headless browser here: missing {', '.join(missing)}")


async def _run_demo(db: Path, root: Path) -> dict:
    """The demo's script, as `convergebot demo` plays it, into `db`; returns what the browser
    checks against: the PR keys, the escalation and the GitHub comments it points at."""
    sim = Simulator(root=root / "github")
    async with SimulatorServer(sim) as gh:
        await sim.create_repo(demo.REPO, files=demo.FILES, collaborators={demo.MAINTAINER: "admin", "bob": "write"})
        numbers = []
        for p in demo.PULLS:
            body = f"Demo: {p.story}." + (f"\n\nDepends-on: {demo.REPO}#{numbers[0]}" if p.depends_on_first else "")
            pr = await sim.open_pr(demo.REPO, title=p.title, head=p.head, author="bob", body=body,
                                   files={p.path: demo.FILES.get(p.path, "") + f"# {p.title}\n"})
            sim.set_reviewer(demo.REPO, demo._reviewer(p.threads, p.path), number=pr.number)
            numbers.append(pr.number)
            if p.main_conflicts:
                await sim.push(demo.REPO, "main", p.main_conflicts, author=demo.MAINTAINER, message="Reword the README")
        keys = [f"{demo.REPO}#{n}" for n in numbers]
        fixer = ScriptedFixer({k: list(p.fixer) for k, p in zip(keys, demo.PULLS, strict=True)}, workdir_root=root)
        async with running(demo._config(db, gh.url), fixer=fixer) as (rt, server):
            sim.configure_webhooks(f"http://127.0.0.1:{server.port}/webhook", demo.SECRET)
            for n in numbers:
                await sim.comment(demo.REPO, n, "/converge", user=demo.MAINTAINER)
            assert await demo._watch(rt, sim, keys, lambda *a: None, 110.0) == 0, "the demo did not play out"
            escalated = keys[1]  # "escalates; a maintainer answers"
            [esc] = await escalations.for_pr(rt.db, escalated)
            view = await prs.get(rt.db, escalated)
        async with httpx.AsyncClient(base_url=gh.url, headers={"Authorization": "token demo-token"}) as http:
            number = int(escalated.rsplit("#", 1)[1])
            comments = (await http.get(f"/repos/{demo.REPO}/issues/{number}/comments")).json()
    return {"keys": keys, "escalated": escalated, "escalation": esc, "pr_url": view.pr.url, "comments": comments}


def _browse(base: str, state: dict) -> dict:
    """The browser's part (blocking Selenium calls: run in a thread while the loop serves)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,1600"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    wait = WebDriverWait(driver, WAIT)
    seen: dict = {}
    try:
        rows = lambda: [r.get_attribute("data-pr") for r in driver.find_elements(By.CSS_SELECTOR, "#prs tbody tr")]  # noqa: E731
        driver.get(base + "/")
        wait.until(lambda d: len(rows()) == 7)
        seen["all"] = rows()

        # Filter by repository: the other repository's PR leaves the list.
        Select(driver.find_element(By.ID, "f-repo")).select_by_value(demo.REPO)
        driver.find_element(By.ID, "f-apply").click()
        wait.until(lambda d: "repo=" in d.current_url and len(rows()) == 5)
        seen["by_repo"] = rows()
        # And by status, the repository kept: every demo PR merged.
        Select(driver.find_element(By.ID, "f-status")).select_by_value("converging")
        driver.find_element(By.ID, "f-apply").click()
        wait.until(ec.presence_of_element_located((By.ID, "no-prs")))
        seen["converging_in_repo"] = driver.find_element(By.ID, "no-prs").text
        driver.find_element(By.ID, "f-clear").click()
        wait.until(lambda d: "?" not in d.current_url and len(rows()) == 7)
        # Ticked, "waiting longer than a day" leaves the PR that has; unticked, all are back.
        driver.find_element(By.ID, "f-stale").click()
        driver.find_element(By.ID, "f-apply").click()
        wait.until(lambda d: "stale=1" in d.current_url and d.execute_script("return document.readyState") == "complete")
        seen["stale"] = rows()
        seen["stale_marked"] = [r.get_attribute("data-pr") for r in driver.find_elements(By.CSS_SELECTOR, "#prs tbody tr")
                                if r.find_elements(By.CSS_SELECTOR, ".waiting-on .stale")]
        seen["stale_ticked"] = driver.find_element(By.ID, "f-stale").is_selected()
        driver.find_element(By.ID, "f-stale").click()
        driver.find_element(By.ID, "f-apply").click()
        wait.until(lambda d: "stale=1" not in d.current_url and len(rows()) == 7)
        seen["unticked"] = rows()
        Select(driver.find_element(By.ID, "f-status")).select_by_value("merged")
        driver.find_element(By.ID, "f-apply").click()
        wait.until(lambda d: "status=merged" in d.current_url and len(rows()) == 5)
        seen["merged"] = rows()
        seen["fixer_runs"] = {r.get_attribute("data-pr"): r.find_element(By.CSS_SELECTOR, "td.attempts").text
                              for r in driver.find_elements(By.CSS_SELECTOR, "#prs tbody tr")}
        driver.save_screenshot(str(ARTIFACTS / "dashboard-list.png"))
        # Every form control has a label, and the filter form is reachable by keyboard alone.
        controls = driver.find_elements(By.CSS_SELECTOR, "form.filters select, form.filters input")
        seen["unlabelled"] = [c.get_attribute("name") for c in controls
                              if not driver.find_elements(By.CSS_SELECTOR, f'label[for="{c.get_attribute("id")}"]')]
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
        seen["tab_order"] = []
        for _ in range(7):  # far enough to pass the filter form's six controls
            active = driver.switch_to.active_element
            seen["tab_order"].append(active.get_attribute("id") or active.text)
            active.send_keys(Keys.TAB)

        # The escalated PR's page, through its link (keyboard-reachable: a real <a>).
        link = driver.find_element(By.CSS_SELECTOR, f'tr[data-pr="{state["escalated"]}"] a.pr-link')
        seen["link_href"] = link.get_attribute("href")
        link.click()
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#rounds > li")))
        seen["title"] = driver.title
        seen["rounds"] = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#rounds > li")]
        seen["question_link"] = driver.find_element(By.CSS_SELECTOR, "a.escalation-comment").get_attribute("href")
        seen["answer_link"] = driver.find_element(By.CSS_SELECTOR, "a.answer-comment").get_attribute("href")
        seen["escalation_text"] = driver.find_element(By.CSS_SELECTOR, "article.escalation").text
        seen["code_in_question"] = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "article.escalation code")]
        shot = ARTIFACTS / "dashboard-pr.png"
        driver.save_screenshot(str(shot))
        seen["screenshot"] = shot
        # On a phone's width the page reflows instead of scrolling sideways.
        driver.set_window_size(390, 844)
        wait.until(lambda d: d.execute_script("return window.innerWidth") <= 400)
        seen["phone_overflow"] = driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        driver.save_screenshot(str(ARTIFACTS / "dashboard-pr-phone.png"))
    finally:
        driver.quit()
    return seen


async def test_dashboard_in_a_headless_browser(tmp_path):
    _browser_or_skip()
    ARTIFACTS.mkdir(exist_ok=True)
    db = tmp_path / "convergebot.db"
    state = await _run_demo(db, tmp_path)
    db_url = f"sqlite:///{db}"
    database = Database(db_url)
    try:
        await enroll(database, OTHER)
        await enroll(database, STALE)
        async with database.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == STALE).values(
                status="waiting_review", waiting_since=utcnow() - timedelta(days=2)))
    finally:
        await database.dispose()
    # The bot is stopped; the dashboard alone serves the state the demo left.
    async with serving(make_config(db_url)) as (rt, http):
        seen = await asyncio.to_thread(_browse, str(http.base_url).rstrip("/"), state)

    keys, escalated, esc = state["keys"], state["escalated"], state["escalation"]
    assert sorted(seen["all"]) == sorted([*keys, OTHER, STALE])
    assert sorted(seen["by_repo"]) == sorted(keys) and OTHER not in seen["by_repo"]
    assert seen["stale"] == seen["stale_marked"] == [STALE] and seen["stale_ticked"]
    assert sorted(seen["unticked"]) == sorted(seen["all"])
    assert seen["converging_in_repo"] == "No PR matches these filters."
    assert sorted(seen["merged"]) == sorted(keys)
    # "fixer husk, rerun, converges": its one fix round ran the fixer twice.
    assert seen["fixer_runs"][keys[2]] == "2 / 1" and seen["fixer_runs"][keys[0]].endswith("/ 0")
    number = escalated.rsplit("#", 1)[1]
    assert seen["link_href"].endswith(f"/prs/octo-org/widgets/{number}")
    assert seen["title"].startswith(escalated)
    # Two rounds, each entry → exit head, none left in progress.
    assert len(seen["rounds"]) == 2 and all("→" in r and "in progress" not in r for r in seen["rounds"])
    assert seen["rounds"][0].startswith("round 1 (review)")
    # The escalation links to the bot's comment on GitHub (here the simulator), the one asking.
    asked = next(c for c in state["comments"] if demo.QUESTION in c["body"])
    assert esc.comment_id == asked["id"]
    assert seen["question_link"] == asked["html_url"] == f"{state['pr_url']}#issuecomment-{asked['id']}"
    answer = next(c for c in state["comments"] if c["body"].startswith("/converge answer"))
    assert seen["answer_link"] == answer["html_url"]
    assert "answered by alice" in seen["escalation_text"]
    assert "mean([])" in seen["code_in_question"], "the question's Markdown was rendered"
    assert seen["unlabelled"] == []
    assert [f for f in seen["tab_order"] if f.startswith("f-")][:6] == [
        "f-scope", "f-status", "f-repo", "f-attention", "f-stale", "f-apply"]
    assert seen["phone_overflow"] <= 0, "the PR page scrolls sideways on a phone"
    png = seen["screenshot"].read_bytes()
    assert len(png) > 1000 and png.startswith(b"\x89PNG\r\n\x1a\n")

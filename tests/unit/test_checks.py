from bot.engine.read import checks_of


def run(name, status="completed", conclusion="success"):
    return {"name": name, "status": status, "conclusion": conclusion}


def status(context, state):
    return {"context": context, "state": state}


def test_all_green_and_our_own_check_run_is_ignored():
    c = checks_of([run("ci"), run("convergebot", "in_progress", None)], {"statuses": [status("lint", "success")]}, [])
    assert (c.state, c.failing, c.pending) == ("success", (), ())


def test_a_failure_wins_over_pending():
    c = checks_of([run("ci", conclusion="failure"), run("e2e", "queued", None)],
                  {"statuses": [status("lint", "error")]}, [])
    assert (c.state, c.failing, c.pending) == ("failure", ("ci", "lint"), ("e2e",))


def test_timed_out_and_cancelled_count_as_failed_neutral_and_skipped_do_not():
    c = checks_of([run("a", conclusion="timed_out"), run("b", conclusion="cancelled"),
                   run("c", conclusion="neutral"), run("d", conclusion="skipped")], {}, [])
    assert c.failing == ("a", "b") and c.state == "failure"


def test_required_checks_only_and_a_missing_one_is_pending():
    c = checks_of([run("ci"), run("flaky", conclusion="failure")], {"statuses": []}, ["ci", "deploy-preview"])
    assert (c.state, c.failing, c.pending) == ("pending", (), ("deploy-preview",))
    ok = checks_of([run("ci"), run("flaky", conclusion="failure")], {}, ["ci"])
    assert ok.state == "success"

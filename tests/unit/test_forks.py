from bot.rules.forks import fork_refusal, head_repo, is_fork


def pr(head_repo: str | None = "acme/app", *, can_modify: bool = False) -> dict:
    head = {"ref": "feat", "repo": {"full_name": head_repo} if head_repo else None}
    return {"head": head, "base": {"ref": "main", "repo": {"full_name": "acme/app"}},
            "user": {"login": "dev"}, "maintainer_can_modify": can_modify}


def test_a_branch_of_the_repository_itself_is_fixed_whatever_the_setting():
    assert not is_fork(pr("Acme/App"))  # GitHub's names are case-insensitive
    assert fork_refusal(pr(), allow_forks=False) is None
    assert fork_refusal(pr(), allow_forks=True) is None


def test_forks_off_every_fork_is_escalated_even_one_maintainers_may_edit():
    esc = fork_refusal(pr("dev/app", can_modify=True), allow_forks=False)
    assert esc is not None and esc.kind == "fork"
    assert "`dev/app:feat`" in esc.question and "fixer.allow_forks" in esc.question
    assert "@dev" in esc.question


def test_forks_on_the_fixer_runs_only_where_maintainers_may_edit():
    assert fork_refusal(pr("dev/app", can_modify=True), allow_forks=True) is None
    esc = fork_refusal(pr("dev/app", can_modify=False), allow_forks=True)
    assert esc is not None and "does not allow maintainers to edit" in esc.question


def test_a_deleted_fork_is_a_fork_nobody_can_push_to():
    assert head_repo(pr(None)) is None and is_fork(pr(None))
    esc = fork_refusal(pr(None, can_modify=True), allow_forks=True)
    assert esc is not None and "no longer exists" in esc.question


def test_the_two_causes_are_two_questions():
    off = fork_refusal(pr("dev/app", can_modify=False), allow_forks=False)
    closed = fork_refusal(pr("dev/app", can_modify=False), allow_forks=True)
    assert off.fingerprint != closed.fingerprint

"""A stack's edges as stored (storage/dependencies.py): recorded once, a fork point kept once
the child was re-based, the re-base marked once, a stack read in landing order either way from
any of its PRs, and a stack edge kept through reads of the body."""

from __future__ import annotations

from datetime import timedelta

from bot.engine.read import dependencies_of
from storage import dependencies
from storage.keys import parse_pr_key
from storage.models import utcnow

A, B, C, D = (parse_pr_key(f"octo/app#{n}") for n in (1, 2, 3, 4))
OTHER = parse_pr_key("octo/app#9")


async def test_a_re_base_is_marked_once_and_a_fork_point_is_kept_once_marked(db):
    async with db.session() as s:
        assert await dependencies.record_stack(s, B, A, "f" * 40)
        assert not await dependencies.record_stack(s, B, A)  # recorded before: one edge
    async with db.session() as s:
        assert await dependencies.mark_restacked(s, B, A, utcnow())
    async with db.session() as s:
        # A second marking (a retried effect, a second decider's) changes nothing: one requeue.
        assert not await dependencies.mark_restacked(s, B, A, utcnow() + timedelta(minutes=1))
        await dependencies.record_stack(s, B, A, "e" * 40)  # read after the re-base: not taken
    async with db.read_session() as s:
        (edge,) = await dependencies.stacked_on(s, B)
        assert edge.fork_point == "f" * 40 and edge.restacked_at is not None
        assert await dependencies.stacked_children(s, A) == []  # re-based off it: no child left


async def test_a_stack_reads_in_landing_order_from_any_of_its_prs_and_survives_a_body_read(db):
    async with db.session() as s:
        await dependencies.record_stack(s, B, A)
        await dependencies.record_stack(s, C, B)
        await dependencies.record_stack(s, D, B)  # a second child of B
    # Its body names another dependency: the stack edge is kept beside it.
    assert await dependencies.replace_for(db, C, [OTHER]) == [OTHER, B]
    stacks = await dependencies.stacks(db, [A, C, OTHER])
    assert stacks == {A: (A, B, C, D), C: (A, B, C, D)}
    deps = await dependencies_of(db, [A, C])
    assert deps[A].stack == (A, B, C, D) and deps[A].depends_on == ()
    assert deps[C].sources == {OTHER: ("body",), B: ("stack",)}


async def test_a_loop_of_edges_ends(db):
    async with db.session() as s:
        await dependencies.record_stack(s, B, A)
        await dependencies.record_stack(s, A, B)
    assert set((await dependencies.stacks(db, [A]))[A]) == {A, B}


async def test_a_body_read_replaces_its_own_prs_body_edges_and_a_dropped_stack_edge_only_its_own(db):
    async with db.session() as s:
        await dependencies.record_stack(s, B, A)
        await dependencies.record_stack(s, B, D)  # B's base changed to D's branch since
        await dependencies.record_stack(s, C, A)
    assert await dependencies.replace_for(db, B, [A]) == [A, D]
    assert await dependencies.replace_for(db, C, [OTHER]) == [OTHER, A]
    assert await dependencies.replace_for(db, B, []) == [A, D]  # its body's edge gone; others kept
    assert await dependencies.replace_for(db, B, [A]) == [A, D]  # and back
    async with db.session() as s:
        await dependencies.drop_stack(s, B, A)
    edges = {k: sorted((d, src) for d, _, src in v) for k, v in (await dependencies.with_status(db)).items()}
    assert edges == {B: [(A, "body"), (D, "stack")], C: [(A, "stack"), (OTHER, "body")]}

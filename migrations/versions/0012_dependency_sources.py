"""Where each dependency was given: `body` (a `Depends-on:` line, replaced at each read of the
body) or `explicit` (given at enrollment: `submit --depends-on`, the API's `depends_on`,
`/converge start --depends-on`), which no read of the body can re-derive. The source joins the
primary key, so the table is rebuilt: the edges it holds were all read from bodies.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _columns(*, with_source: bool) -> list[sa.Column]:
    columns = [sa.Column("pr_key", sa.String(300), primary_key=True),
               sa.Column("depends_on_key", sa.String(300), primary_key=True)]
    if with_source:
        columns.append(sa.Column("source", sa.String(16), primary_key=True))
    return columns


def _edges() -> list[tuple[str, str]]:
    rows = op.get_bind().execute(sa.text("SELECT DISTINCT pr_key, depends_on_key FROM dependencies"))
    return [(pr_key, dep) for pr_key, dep in rows]


def upgrade() -> None:
    edges = _edges()
    op.drop_table("dependencies")
    table = op.create_table("dependencies", *_columns(with_source=True))
    if edges:
        op.bulk_insert(table, [{"pr_key": k, "depends_on_key": d, "source": "body"} for k, d in edges])


def downgrade() -> None:
    # An explicit edge becomes a body's: the next read of that body drops it.
    edges = _edges()
    op.drop_table("dependencies")
    table = op.create_table("dependencies", *_columns(with_source=False))
    if edges:
        op.bulk_insert(table, [{"pr_key": k, "depends_on_key": d} for k, d in edges])

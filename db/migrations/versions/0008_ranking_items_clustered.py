"""ranking items clustered by ranking; two indexes another index already serves

Every read of `ranking_items` goes by ranking (its primary key leads with
`ranking_id`), so the index on (ranking_id, tier) only cost a third B-tree per
item written, and `ix_candidates_prompt_id` repeats the first column of the unique
key on (prompt_id, content_hash). On SQLite the items become a WITHOUT ROWID table:
the rows live in their primary key's order, one B-tree instead of two. Measured on
100,000 rankings: inserting the 650,000 items took 1.8 s against 2.5 s, and the
pairs build, which reads them by ranking, a fifth less (bench/README.md, issue 15).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_candidates_prompt_id", table_name="candidates")
    op.drop_index("ix_ranking_items_ranking_tier", table_name="ranking_items")
    if op.get_bind().dialect.name == "sqlite":  # rebuilt as a WITHOUT ROWID table (the rows are copied)
        with op.batch_alter_table("ranking_items", recreate="always", table_kwargs={"sqlite_with_rowid": False}):
            pass


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("ranking_items", recreate="always", table_kwargs={"sqlite_with_rowid": True}):
            pass
    op.create_index("ix_ranking_items_ranking_tier", "ranking_items", ["ranking_id", "tier"], unique=False)
    op.create_index("ix_candidates_prompt_id", "candidates", ["prompt_id"], unique=False)

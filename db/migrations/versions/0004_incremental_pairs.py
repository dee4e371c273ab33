"""incremental pair builds: which rankings the comparisons hold, and how a build ran

Comparisons lose their build_id index: nothing looks pairs up by build, and every
pair written paid for it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default (not an expression) lets SQLite add the column in place, without
    # recreating `rankings` (whose items reference it) and copying every row.
    with op.batch_alter_table("rankings", schema=None) as batch_op:
        batch_op.add_column(sa.Column("in_pairs", sa.Boolean(), server_default="0", nullable=False))
    with op.batch_alter_table("pair_builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("mode", sa.String(length=12), nullable=True))
        batch_op.add_column(sa.Column("n_changed", sa.Integer(), nullable=True))
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_comparisons_build_id"))


def downgrade() -> None:
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_comparisons_build_id"), ["build_id"], unique=False)
    with op.batch_alter_table("pair_builds", schema=None) as batch_op:
        batch_op.drop_column("n_changed")
        batch_op.drop_column("mode")
    with op.batch_alter_table("rankings", schema=None) as batch_op:
        batch_op.drop_column("in_pairs")

"""gold answers, annotation lead time, why a task was selected, what a pair build left out

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gold_answers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("tiers", sa.JSON(), nullable=False),
        sa.Column("origin", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_gold_answers_prompt_id_prompts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gold_answers")),
        sa.UniqueConstraint("prompt_id", name=op.f("uq_gold_answers_prompt_id")),
    )
    with op.batch_alter_table("rankings", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lead_time", sa.Float(), nullable=True))
    with op.batch_alter_table("pair_builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("excluded", sa.JSON(), nullable=True))
    with op.batch_alter_table("ls_tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("selection", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ls_tasks", schema=None) as batch_op:
        batch_op.drop_column("selection")
    with op.batch_alter_table("pair_builds", schema=None) as batch_op:
        batch_op.drop_column("excluded")
    with op.batch_alter_table("rankings", schema=None) as batch_op:
        batch_op.drop_column("lead_time")
    op.drop_table("gold_answers")

"""conversations: prompts and candidates may hold a list of messages

A prompt is a conversation (system, user and assistant turns ending with the
user's), and a candidate may be several turns. Existing rows are the plain case,
one user message and one assistant reply: `messages` stays NULL for them, their
`text` and content hashes are unchanged, so every id in an existing store stays
what it was (preflab.db.conversation). Rankings gain `details`: what a public
dataset said beyond the order (a "tie (bothbad)" verdict, a score ratio).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prompts", sa.Column("messages", sa.JSON(), nullable=True))
    op.add_column("candidates", sa.Column("messages", sa.JSON(), nullable=True))
    op.add_column("rankings", sa.Column("details", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rankings") as batch:
        batch.drop_column("details")
    with op.batch_alter_table("candidates") as batch:
        batch.drop_column("messages")
    with op.batch_alter_table("prompts") as batch:
        batch.drop_column("messages")

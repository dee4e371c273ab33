"""engine requests: every request sent to a model server, with its answer, keyed by what was asked

Judges and generators may run on a server (vLLM, any OpenAI-compatible endpoint, a hosted API:
`preflab.lm.engines`). Each request and the answer it got are stored under a hash of what was
asked, so a re-run, a run resumed after a crash, or another command asking the same thing never
pays for it twice; the tokens each answer cost are kept beside it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "engine_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("endpoint", sa.String(length=40), nullable=False),
        sa.Column("model", sa.String(length=300), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("answer", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_requests")),
        sa.UniqueConstraint("key", name=op.f("uq_engine_requests_key")),
    )


def downgrade() -> None:
    op.drop_table("engine_requests")

"""ranking items name the model that wrote each reply, as the ranking's source row says

A candidate is stored once per prompt and text, and its `model` is the first import's: an identical
reply from two models (Chatbot Arena's "Hello! How can I help you today?") was credited to whichever
was stored first, and a reply an import without models (HH-RLHF) stored first had none. Each ranking
item now keeps its own author; NULL (every item written before, and Label Studio's, judges' and
best-of-n rankings of generated candidates) means the candidate's model version or model, as before.

On SQLite the column is added in place; dropping it rebuilds the table, kept WITHOUT ROWID (0008).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ranking_items", table_kwargs={"sqlite_with_rowid": False}) as batch:
        batch.add_column(sa.Column("model", sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ranking_items", table_kwargs={"sqlite_with_rowid": False}) as batch:
        batch.drop_column("model")

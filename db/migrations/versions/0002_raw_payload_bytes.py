"""raw records keep payloads that are not text as bytes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("raw_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("payload_bytes", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("raw_records", schema=None) as batch_op:
        batch_op.drop_column("payload_bytes")

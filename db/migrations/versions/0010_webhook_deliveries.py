"""webhook deliveries by status: the ones waiting to be parsed are found without a scan

`preflab serve` stores each Label Studio delivery as a raw record (source `label-studio:webhook`) with
status `pending`, and parses it right after; its worker counts and reads the pending ones, and `/health`
reads the newest delivery. Without an index each of those scanned every raw record, which public-dataset
imports make many. The index is partial, to deliveries only: an import's rows never enter it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

DELIVERIES = "source = 'label-studio:webhook'"


def upgrade() -> None:
    op.create_index(
        "ix_raw_records_deliveries",
        "raw_records",
        ["status", "id"],
        sqlite_where=sa.text(DELIVERIES),
        postgresql_where=sa.text(DELIVERIES),
    )


def downgrade() -> None:
    op.drop_index("ix_raw_records_deliveries", table_name="raw_records")

"""raw records by source and status: webhook deliveries waiting to be parsed are found without a scan

`preflab serve` stores each Label Studio delivery as a raw record with status `pending` and parses it
right after; its worker counts and reads the pending ones, and `/health` reads the newest delivery.
Without this index each of those scanned every raw record, which public-dataset imports make many.
The index grows at its right-hand end on an import (one source and status, ids increasing).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""
from alembic import op


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_raw_records_source_status', 'raw_records', ['source', 'status', 'id'])


def downgrade() -> None:
    op.drop_index('ix_raw_records_source_status', table_name='raw_records')

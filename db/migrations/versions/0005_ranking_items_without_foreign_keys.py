"""ranking items without foreign-key constraints

A ranking's items are written in the transaction that writes the ranking and finds
or creates its candidates, and preflab deletes neither, so the references hold by
construction. On Postgres each constraint cost a trigger and a row lock per item
written: 15 s of a 100,000-ranking import (bench/README.md, issue 15).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ranking_items", schema=None) as batch_op:
        batch_op.drop_constraint("fk_ranking_items_candidate_id_candidates", type_="foreignkey")
        batch_op.drop_constraint("fk_ranking_items_ranking_id_rankings", type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("ranking_items", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_ranking_items_ranking_id_rankings", "rankings", ["ranking_id"], ["id"], ondelete="CASCADE"
        )
        batch_op.create_foreign_key(
            "fk_ranking_items_candidate_id_candidates", "candidates", ["candidate_id"], ["id"], ondelete="CASCADE"
        )

"""drift alarms on nodes; prompt and reply of every LLM call

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("alarm", sa.JSON(), nullable=True))
    with op.batch_alter_table("llm_calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("response", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("llm_calls", schema=None) as batch_op:
        batch_op.drop_column("response")
        batch_op.drop_column("prompt")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("alarm")

"""where each evaluation ran: the host and the GPU ids it was given (Ray runner)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("host", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("gpus", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_column("gpus")
        batch_op.drop_column("host")

"""attempt numbers on nodes and evaluations (``revtree retry``)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), server_default="1", nullable=False))
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), server_default="1", nullable=False))
        batch_op.drop_index("ux_evaluations_key")
        batch_op.create_index(
            "ux_evaluations_key",
            ["run_id", "node_id", "stage", "repeat", "attempt"],
            unique=True,
        )


def downgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_index("ux_evaluations_key")
        batch_op.create_index(
            "ux_evaluations_key", ["run_id", "node_id", "stage", "repeat"], unique=True
        )
        batch_op.drop_column("attempt")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("attempt")

"""Alembic environment: revtree hands in a live connection (see ``revtree.memory.db``)."""

from alembic import context

from revtree.memory.models import METADATA

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=METADATA, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

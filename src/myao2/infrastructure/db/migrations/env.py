"""Alembic environment: migrates the connection handed over by `myao2.infrastructure.db.engine`."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

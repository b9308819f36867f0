"""Alembic's entry point: runs the migrations on the connection given in ``config.attributes``."""

from alembic import context

from otel_profiler.app.auth.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()

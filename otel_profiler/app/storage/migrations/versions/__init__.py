"""One Alembic revision per schema change, oldest first."""

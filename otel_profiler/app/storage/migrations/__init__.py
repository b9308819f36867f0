"""The app's schema migrations (Alembic): ``env.py`` runs them on the connection ``database``
hands over; ``versions/`` holds one module per schema change."""

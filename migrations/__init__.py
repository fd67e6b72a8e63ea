"""Versioned schema changes (Alembic), applied by `convergebot migrate` and at start-up."""

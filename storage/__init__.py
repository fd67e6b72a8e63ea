"""Persistence for convergebot: models, database setup, and one module per aggregate."""

"""Maintainer commands given as PR comments."""

"""Maintainer commands given as PR comments (DESIGN §7)."""

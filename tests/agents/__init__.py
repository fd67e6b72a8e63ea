"""The real agent CLIs against a fake model server: `make agents` (docs/fixers.md, "Proven against the real CLIs")."""

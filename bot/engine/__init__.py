"""The engine: pure decisions over snapshots (decide) and the shell that reads and acts."""

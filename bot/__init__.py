"""convergebot: drives GitHub pull requests through review rounds until they converge."""

__version__ = "0.1.0"

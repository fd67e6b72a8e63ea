"""Everything that crosses GitHub: the client wrapper and the simulator."""

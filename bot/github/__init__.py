"""Everything that crosses GitHub: the one client wrapper (transport policy, endpoints, HTTP
cache, installations, rate budget) and its errors."""

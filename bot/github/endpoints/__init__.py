"""The GitHub client's endpoint methods, one mixin per concept over the transport
(`bot/github/transport.py`), composed into `GitHubClient` (`bot/github/client.py`)."""

"""The runtime: the process's wiring.

`context` holds what every job handler is given (the database, the GitHub client, the config,
the per-PR turns); `workers` runs the jobs; `leadership` elects the replica that polls, scans
and redelivers; `periodic` runs those; `serve` puts it all together behind the HTTP server.
"""

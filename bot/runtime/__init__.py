"""The runtime: what every handler is handed, and what runs the handlers.

`context` holds the `Runtime` (the database, the GitHub client, the config, the per-PR turns, the
process's memories); `workers` runs the jobs; `leadership` elects the replica that polls, scans
and redelivers; `periodic` runs those duties. It imports no folder above it: `serve` (in
bot/surfaces/) puts the handlers together behind the HTTP server.
"""

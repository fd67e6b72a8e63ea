"""Intake: news arriving, and intent turned into jobs.

In: webhook deliveries (the endpoint, its batched writes, their routing), deliveries GitHub is
asked to send again (redelivery), what the periodic repository scan and repository watch find,
comments recovered on escalated PRs, and submissions (`submit_pr`). Out: rows and queued jobs
(a PR's sync, a command, an enrollment), each idempotent on its key.
"""

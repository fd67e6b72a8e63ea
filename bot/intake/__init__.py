"""Intake: news arriving, and intent turned into jobs.

In: webhook deliveries (the endpoint, its batched writes, their routing), deliveries GitHub is
asked to send again (redelivery), what the poller, the periodic repository scan and repository
watch find. Out: rows and queued jobs (a PR's sync, a command, an enrollment through the
engine's `submit_pr`), each idempotent on its key.
"""

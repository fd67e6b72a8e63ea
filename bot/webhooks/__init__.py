"""Webhook intake: routing raw GitHub events to jobs."""

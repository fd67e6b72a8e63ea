"""Plumbing shared by the bot and the simulator, which import nothing of each other but this:
child processes watched by a pidfd (`children`) and one aiohttp connection pool under httpx
(`httppool`)."""

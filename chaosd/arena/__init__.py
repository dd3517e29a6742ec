"""The Arena: a live page served by the daemon itself, and its post-mortem twin for finished runs.

``chaosd.arena.mount`` adds it to the daemon's app; ``chaosd.arena.postmortem`` needs no aiohttp.
"""

"""Seeded random streams: one per purpose, so adding a fault never shifts the arrivals."""

from __future__ import annotations

import random

__all__ = ["Streams"]


class Streams:
    """Independent ``random.Random`` streams derived from one seed and a name."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def stream(self, name: str) -> random.Random:
        # A str seed is hashed with SHA-512 by random.Random: stable across processes and runs.
        return random.Random(f"chaosd:{self.seed}:{name}")

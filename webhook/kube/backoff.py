"""Exponential back-off with jitter, so replicas do not retry in lock-step."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays initial, initial*factor, ... capped at maximum, each stretched by up to `jitter`."""

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 10.0,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.attempts = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The delay before the next attempt; grows until `reset()`."""
        base = min(self.maximum, self.initial * self.factor**self.attempts)
        self.attempts += 1
        return base * (1.0 + self.jitter * self._rng.random())

    def reset(self) -> None:
        self.attempts = 0

"""The callers' policy (``[clients]``): how long callers wait, whether and when they retry, when they leave."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from chaosd.core.durations import Seconds

__all__ = ["BackoffConfig", "BudgetConfig", "ClientsConfig", "PatienceConfig", "RetryOn"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackoffConfig(_Model):
    base: Seconds = Field(default=0.01, ge=0)
    factor: float = Field(default=2.0, ge=1)
    max: Seconds = Field(default=1.0, ge=0)
    jitter: float = Field(default=0.0, ge=0, le=1, description="share of the delay drawn at random")


RetryOn = Literal["timeout", "refused", "failed"]


class BudgetConfig(_Model):
    """A retry is allowed only while retries over the last 10 s stay within ``ratio`` × first attempts over them."""

    ratio: float = Field(ge=0, description="retries allowed per first attempt over a sliding 10 s")


class PatienceConfig(_Model):
    """How long an attempt stays waiting in the queue before its caller hangs up (reneging: Erlang A)."""

    distribution: Literal["exponential", "constant"] = "exponential"
    mean: Seconds = Field(gt=0)


class ClientsConfig(_Model):
    """The callers behind the first attempts: how long they wait, whether and when they retry, when they leave.

    The defaults are callers that wait forever and never retry."""

    timeout: Seconds = Field(default=0.0, ge=0, description="how long a caller waits for an attempt; 0 = forever")
    retries: int = Field(default=0, ge=0, le=100, description="retries after the first attempt")
    retry_on: tuple[RetryOn, ...] = Field(default=("timeout", "refused"), description="what a caller retries")
    backoff: BackoffConfig = Field(
        default_factory=lambda: BackoffConfig(base=0.0),
        description="delay before retry n: min(max, base·factor^(n−1)), its jitter share drawn at random",
    )
    budget: BudgetConfig | None = Field(default=None, description="absent: retries unlimited by a budget")
    patience: PatienceConfig | None = Field(default=None, description="absent: attempts never leave the queue")
    drop_expired: bool = Field(default=False, description="workers discard attempts whose caller stopped waiting")
    retry_after: bool = Field(
        default=False, description="callers wait at least the retry-after hint a refusal carries before retrying"
    )

    @field_validator("retry_on")
    @classmethod
    def _distinct(cls, retry_on: tuple[RetryOn, ...]) -> tuple[RetryOn, ...]:
        if len(set(retry_on)) != len(retry_on):
            raise ValueError(f"retry_on lists an entry twice (got {list(retry_on)})")
        return retry_on

    @property
    def active(self) -> bool:
        """Whether callers do anything but wait forever for a single attempt."""
        return self.timeout > 0 or self.retries > 0 or self.patience is not None

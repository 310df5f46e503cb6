"""When a failed attempt is tried again, and how long to wait first.

Written here rather than taken from tenacity or stamina because the engine needs the first
attempt to cost nothing (no retry object per call), per-attempt timeouts that are the engine's
own, and cancellation that is never retried or swallowed; what remains is the few lines below.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from stockade.engine.errors import RetryableError, ToolDefinitionError, ToolTimeoutError
from stockade.errors import ConfigurationError

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter.

    ``attempts`` counts the first try: 1 means never retry. The wait before retry *n* (n >= 1)
    is ``initial_delay_s * multiplier ** (n - 1)``, capped at ``max_delay_s``, then spread by
    ``jitter`` (0.25 = up to 25 % either way) so that callers failing together do not retry
    together.

    Which failures are retried:

    * `RetryableError` from any tool: the tool vouches the retry is safe.
    * for idempotent or read-only tools only, errors of the ``retry_on`` types
      (connection errors and timeouts the tool itself raised), and the engine's own per-attempt
      timeout when ``retry_on_timeout`` is set (off by default: a tool that hung once usually
      hangs again, and each retry costs the caller a whole timeout).

    Argument validation errors, denials and cancellation are never retried.
    """

    attempts: int = 3
    initial_delay_s: float = 0.05
    multiplier: float = 2.0
    max_delay_s: float = 2.0
    jitter: float = 0.25
    retry_on: tuple[type[BaseException], ...] = TRANSIENT_ERRORS
    retry_on_timeout: bool = False

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy.attempts must be at least 1, got {self.attempts}"
            )
        if self.initial_delay_s < 0 or self.max_delay_s < 0:
            raise ConfigurationError("RetryPolicy delays must not be negative")
        if self.multiplier < 1:
            raise ConfigurationError(f"RetryPolicy.multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(
                f"RetryPolicy.jitter must be between 0 and 1, got {self.jitter}"
            )

    def should_retry(self, error: BaseException, attempt: int, *, safe_tool: bool) -> bool:
        """Whether attempt number ``attempt`` (1-based) failing with ``error`` earns another."""
        if attempt >= self.attempts:
            return False
        if isinstance(error, RetryableError):
            return True
        if not safe_tool:
            return False
        if isinstance(error, ToolTimeoutError):
            return self.retry_on_timeout
        return isinstance(error, self.retry_on)

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_delay_s, self.initial_delay_s * self.multiplier ** (attempt - 1))
        spread = base * self.jitter
        return max(0.0, base - spread + 2 * spread * rng.random())


NO_RETRY = RetryPolicy(attempts=1)
DEFAULT_RETRY = RetryPolicy()


def as_retry_policy(value: RetryPolicy | int | bool | None) -> RetryPolicy | None:
    """Normalise the ``retry=`` argument of `@tool`: an int is a number of attempts,
    False means never retry, None means the engine's default."""
    if value is None or isinstance(value, RetryPolicy):
        return value
    if value is False:
        return NO_RETRY
    if value is True:
        return DEFAULT_RETRY
    if isinstance(value, int):
        return RetryPolicy(attempts=value)
    raise ToolDefinitionError(
        f"retry must be a RetryPolicy, an int (attempts), a bool or None; got {value!r}"
    )

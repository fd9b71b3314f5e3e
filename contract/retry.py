"""Retry policies as data: how often, and how far apart, a call to one dependency is tried.

Each external dependency (a chat-completions endpoint, Label Studio, the backend an
episode runs on, the Prefect API) has one ``RetryPolicy`` in the settings, applied in
exactly one place; the layers above it never try the same failure again. The waits
double from ``backoff_s`` up to ``max_backoff_s``; tenacity runs the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import tenacity
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "BACKEND_RETRY",
    "LABEL_STUDIO_RETRY",
    "LLM_RETRY",
    "PREFECT_API_ATTEMPTS",
    "RetryPolicy",
]

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """``attempts`` tries in all, the n-th wait ``min(backoff_s * 2**(n-1), max_backoff_s)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = Field(ge=1, le=20, description="tries in all (1: never tried again)")
    backoff_s: float = Field(default=0.5, ge=0, le=600, description="first wait between tries")
    max_backoff_s: float = Field(
        default=8.0, ge=0, le=3600, description="longest wait between tries"
    )

    @model_validator(mode="after")
    def _ordered(self) -> RetryPolicy:
        if self.backoff_s > self.max_backoff_s:
            raise ValueError(
                f"backoff_s ({self.backoff_s}) must not exceed max_backoff_s ({self.max_backoff_s})"
            )
        return self

    @classmethod
    def once(cls) -> RetryPolicy:
        """One try, no retry (a probe, a benchmark's request)."""
        return cls(attempts=1, backoff_s=0.0, max_backoff_s=0.0)

    def wait_s(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 for the second try)."""
        return float(min(self.backoff_s * 2 ** (retry - 1), self.max_backoff_s))

    def call(
        self,
        fn: Callable[[], T],
        *,
        transient: Callable[[BaseException], bool],
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[int, BaseException], None] | None = None,
    ) -> T:
        """``fn()``, tried again while it raises an exception ``transient`` accepts; the
        last exception is raised as it is once the attempts are spent."""

        def before_sleep(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            if on_retry is not None and error is not None:
                on_retry(state.attempt_number, error)

        retrying = self._retrying(tenacity.retry_if_exception(transient), sleep, before_sleep)
        return retrying(fn)

    def until(
        self,
        fn: Callable[[], T],
        *,
        again: Callable[[T], bool],
        sleep: Callable[[float], None] = time.sleep,
    ) -> tuple[T, int]:
        """``fn()``'s last result and how many retries it took: ``fn`` is called again
        while ``again(result)`` (a result that says a transient failure)."""
        retrying = self._retrying(tenacity.retry_if_result(again), sleep, None)
        result = retrying(fn)
        return result, retrying.statistics["attempt_number"] - 1

    def _retrying(
        self,
        retry: tenacity.retry_base,
        sleep: Callable[[float], None],
        before_sleep: Callable[[tenacity.RetryCallState], None] | None,
    ) -> tenacity.Retrying:
        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
            retry=retry,
            sleep=sleep,
            before_sleep=before_sleep,
            reraise=True,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )


LLM_RETRY = RetryPolicy(attempts=4, backoff_s=0.5, max_backoff_s=8.0)
"""A chat-completions endpoint: connection errors, timeouts, 429 and 5xx."""
LABEL_STUDIO_RETRY = RetryPolicy(attempts=6, backoff_s=0.5, max_backoff_s=8.0)
"""A Label Studio API call: connection errors, timeouts, 408, 429 and 5xx."""
BACKEND_RETRY = RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0)
"""An episode whose backend failed: three attempts on three devices, one after another."""
PREFECT_API_ATTEMPTS = 6
"""Tries of one Prefect API request, by Prefect's own client (2, 4, 8 ... s apart)."""

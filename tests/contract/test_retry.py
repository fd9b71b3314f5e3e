"""Retry policies: the waits they promise, and what they try again."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract import RetryPolicy


def test_waits_double_from_the_first_and_stop_at_the_longest() -> None:
    policy = RetryPolicy(attempts=6, backoff_s=0.5, max_backoff_s=3.0)
    assert [policy.wait_s(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_until_tries_again_only_while_the_result_says_so() -> None:
    policy = RetryPolicy(attempts=5, backoff_s=1.0, max_backoff_s=8.0)
    waits: list[float] = []
    results = iter(["busy", "busy", "done", "busy"])
    assert policy.until(lambda: next(results), again=lambda r: r == "busy", sleep=waits.append) == (
        "done",
        2,
    )
    assert waits == [1.0, 2.0]
    waits.clear()
    never = iter(["busy"] * 9)
    assert policy.until(lambda: next(never), again=lambda r: True, sleep=waits.append) == (
        "busy",
        4,
    )
    assert waits == [1.0, 2.0, 4.0, 8.0]


def test_call_raises_the_last_transient_error_and_a_permanent_one_at_once() -> None:
    policy = RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0)
    tries: list[int] = []
    heard: list[tuple[int, str]] = []

    def flaky() -> str:
        tries.append(len(tries))
        raise ConnectionError(f"try {len(tries)}")

    with pytest.raises(ConnectionError, match="try 3"):
        policy.call(
            flaky,
            transient=lambda e: isinstance(e, ConnectionError),
            sleep=lambda s: None,
            on_retry=lambda n, e: heard.append((n, str(e))),
        )
    assert heard == [(1, "try 1"), (2, "try 2")]
    tries.clear()
    with pytest.raises(ConnectionError, match="try 1"):
        policy.call(flaky, transient=lambda e: False, sleep=lambda s: None)
    assert tries == [0]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 2, "backoff_s": -1}, "backoff_s"),
        ({"attempts": 2, "backoff_s": 9, "max_backoff_s": 4}, "must not exceed max_backoff_s"),
        ({"attempts": 2, "retries": 3}, "retries"),
    ],
)
def test_a_policy_out_of_range_names_its_field(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        RetryPolicy.model_validate(fields)

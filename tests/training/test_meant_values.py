"""Values a conversation means but does not write (``training.meant_values``): the offsets
a user's turn states, and the times a text means."""

from __future__ import annotations

import pytest

from training.meant_values import stated_offsets, with_times_meant


@pytest.mark.parametrize(
    ("text", "offsets"),
    [
        ('add a two-hour calendar event named "Dinner at"', [120]),
        ("block two hours in my calendar", [120]),
        ("from opening time for three hours, or One hour", [180, 60]),
        ("a ride that picks me up 30 minutes before it starts", [-30]),
        ("call me 2 hours after the match, and 15 minutes after", [120, 15]),
        ("one hour before, and 1 hour before again", [-60]),
        ("Start a 25-minute timer and log 60 minutes of running", []),
        ("the opening hours, the earliest free hour, 0 hours", []),
        ("Running 10 minutes late; 3 hourly doses", []),
    ],
)
def test_an_offset_is_hours_or_a_length_before_or_after(text: str, offsets: list[int]) -> None:
    assert stated_offsets(text) == offsets


def test_each_time_is_followed_by_its_written_form_and_the_times_its_offsets_reach() -> None:
    assert with_times_meant("at 19:30, not 7:05 or 22:45", [120, -30]) == (
        "at 19:30 (+2h 21:30) (-30m 19:00), not 7:05 (07:05) (+2h 09:05) (-30m 06:35) "
        "or 22:45 (-30m 22:15)"
    )
    assert with_times_meant("0:10 and 23:59", [-15, 1]) == (
        "0:10 (00:10) (+1m 00:11) and 23:59 (-15m 23:44)"
    )


def test_only_a_time_of_day_standing_alone_is_read_as_one() -> None:
    text = '{"at":"2026-03-14T10:00","t":"19:30:00","n":"119:30","v":"v1.10:30","h":"24:00"}'
    assert with_times_meant(text, [60]) == text
    assert with_times_meant('{"start":"08:30"}', [90]) == '{"start":"08:30 (+90m 10:00)"}'
    assert with_times_meant("9:00 and 17:00", []) == "9:00 (09:00) and 17:00"

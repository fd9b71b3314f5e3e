"""What a round's summary tells a person about items left to people: the terminal and the
``round-summary`` artifact say the same, with the place to decide them and what follows."""

from __future__ import annotations

from cli.rounds import _round_text
from contract import moment
from flows.round_stages import PeopleWaiting, RoundSummary
from human_gate import GateUnavailableError, Workplace

DESK = Workplace("Label Studio project 'flywheel round-x'", "http://127.0.0.1:8089/projects/3/data")


def _summary(waiting: PeopleWaiting | None) -> RoundSummary:
    counts = {"curated": 30, "approved": 4, "pending": 26}
    return RoundSummary(
        round_id="round-x",
        flow_run_id=None,
        dataset_version=None,
        counts=counts,
        capabilities=[],
        waiting=waiting,
    )


def test_a_round_with_items_for_people_says_where_and_what_next() -> None:
    summary = _summary(PeopleWaiting.find(26, lambda: DESK))
    for shown in (summary.markdown(), _round_text(summary, "http://127.0.0.1:4200/runs/1")):
        assert f"26 item(s) wait for people in {DESK.name}: {DESK.url}." in shown
        assert "then run `flywheel gate sync`" in shown
        assert "joins the next round's dataset version, not this round's" in shown


def test_a_gate_that_does_not_answer_is_said_not_hidden() -> None:
    def down() -> Workplace | None:
        raise GateUnavailableError("Label Studio at http://127.0.0.1:8089 did not answer")

    waiting = PeopleWaiting.find(26, down)
    assert (waiting.workplace, waiting.url) == (None, None)
    assert "in the gate (Label Studio at http://127.0.0.1:8089 did not answer)" in waiting.text()


def test_a_round_nobody_waits_on_says_nothing_of_people() -> None:
    summary = _summary(None)
    for shown in (summary.markdown(), _round_text(summary, "http://127.0.0.1:4200/runs/1")):
        assert "people" not in shown


def test_the_approval_time_reads_to_the_second_in_utc() -> None:
    summary = _summary(None).model_copy(
        update={
            "approval": {
                "dataset_id": "ds-1",
                "decision": "approve",
                "approver": "auto",
                "automatic": True,
                "decided_at": "2026-12-04T02:07:31.912755Z",
            }
        }
    )
    assert "Proposal approved by auto at 2026-12-04 02:07:31 UTC" in summary.markdown()
    assert moment("2026-12-04T03:07:31.5+01:00") == "2026-12-04 02:07:31 UTC"

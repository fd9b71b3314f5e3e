"""A loop turn's candidate figures: the trainer's result, never the champion's."""

from __future__ import annotations

from typing import Any

from flows.loop import Turn


def _turn() -> Turn:
    """A second turn whose champion (from an earlier turn) scored 0.25, 0.3 seen."""
    return Turn(
        turn=2,
        round_id="round-2",
        collected_by="model-a",
        trajectories=200,
        dataset_id="ds-2",
        dataset_size=180,
        champion_id="model-a",
        overall=0.25,
        overall_seen=0.3,
    )


def _trained(**metrics: Any) -> dict[str, Any]:
    return {
        "model_id": "model-b",
        "overall": 0.125,
        "parts": {"seen": 0.175, "unseen": 0.0},
        "metrics": metrics,
    }


def test_a_refused_candidate_shows_its_own_figures_beside_the_champions() -> None:
    turn = _turn()
    turn.record_training(
        _trained(sft_rows=1649.0, sft_epochs=2.909, rl_informative_share=0.625), "kept"
    )
    assert (turn.model_id, turn.decision) == ("model-b", "kept")
    assert (turn.candidate_overall, turn.candidate_seen) == (0.125, 0.175)
    assert (turn.champion_id, turn.overall, turn.overall_seen) == ("model-a", 0.25, 0.3)
    assert (turn.sft_rows, turn.sft_epochs, turn.informative_share) == (1649, 2.909, 0.625)
    assert isinstance(turn.sft_rows, int)


def test_a_candidate_without_sft_or_rl_or_a_seen_part_leaves_those_figures_empty() -> None:
    turn = _turn()
    trained = _trained() | {"parts": {}}
    turn.record_training(trained, "promoted")
    assert turn.candidate_overall == 0.125 and turn.candidate_seen is None
    assert turn.sft_rows is None and turn.sft_epochs is None
    assert turn.informative_share is None

"""``flywheel bench seeds``: the spread of one recipe's models across training seeds, on
reports built by hand for the arithmetic, and one small run through the real round and
trainer flows for the plumbing."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import pytest
import torch

from bench.seeds import run_seeds_benchmark, seed_spread, seeds_table
from contract import (
    CostStats,
    FeedbackReport,
    FeedbackSource,
    PartScores,
    TaskSpec,
    TaskStats,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.development import draw_development_set, part_of
from training.evaluate import capability_scores, overall_score
from training.promotion import PromotionRule

RULE = PromotionRule()
TASKS = draw_development_set(60, 7, MobileSandbox()).tasks
SEEN = [t.fingerprint for t in TASKS if part_of(t) == "seen"]
UNSEEN = [t.fingerprint for t in TASKS if part_of(t) == "unseen"]


def _scores(tasks: Sequence[TaskSpec], rates: dict[str, float]) -> PartScores:
    scores = capability_scores(tasks, rates)
    return PartScores(tasks=len(tasks), capability_scores=scores, overall=overall_score(scores))


def _report(solved: set[str]) -> FeedbackReport:
    """A development report in which exactly the tasks ``solved`` succeeded."""
    rates = {t.fingerprint: float(t.fingerprint in solved) for t in TASKS}
    whole = _scores(TASKS, rates)
    return FeedbackReport(
        format_version=1,
        source=FeedbackSource.TRAINER,
        produced_by="test",
        model="model-test",
        created_at=datetime.now(UTC),
        capability_scores=whole.capability_scores,
        overall=whole.overall,
        tasks=tuple(
            TaskStats(fingerprint=fp, attempts=1, successes=int(fp in solved), mean_cost=0.2)
            for fp in sorted(rates)
        ),
        cost=CostStats(mean_cost=0.2, mean_steps=3.0, mean_tool_calls=2.0, mean_output_tokens=40.0),
        parts={
            part: _scores([t for t in TASKS if part_of(t) == part], rates)
            for part in ("seen", "unseen")
        },
    )


def test_the_spread_counts_seen_tasks_by_how_many_seeds_solved_them() -> None:
    assert len(SEEN) >= 30 and UNSEEN
    first = set(SEEN[:20]) | {UNSEEN[0]}  # an unseen success counts nowhere
    second = set(SEEN[10:25])
    third = set(SEEN[5:15])
    reports = [_report(first), _report(second), _report(third)]

    spread = seed_spread(reports, TASKS, RULE)

    # every seed: SEEN[10:15]; some: SEEN[:10] and SEEN[15:25]; none: the rest
    assert spread["seen_tasks"] == {
        "of": len(SEEN),
        "every": 5,
        "some": 20,
        "none": len(SEEN) - 25,
    }
    seen = [r.parts["seen"].overall or 0.0 for r in reports]
    assert spread["seen"] == {
        "mean": pytest.approx(statistics.fmean(seen)),
        "sd": pytest.approx(statistics.stdev(seen)),
        "min": min(seen),
        "max": max(seen),
    }
    assert spread["seen"]["sd"] > 0
    assert len(spread["gate_against_first"]) == 2
    templates = {t.fingerprint: t.template for t in TASKS}
    expected = {}
    for template in {templates[fp] for fp in SEEN}:
        draws = [fp for fp in SEEN if templates[fp] == template]
        counts = [sum(fp in solved for fp in draws) for solved in (first, second, third)]
        if len(set(counts)) > 1:
            expected[template] = (len(draws), counts)
    unsettled = spread["unsettled_templates"]
    assert expected  # the three reports differ on some template
    assert {row["template"]: (row["draws"], row["solved"]) for row in unsettled} == expected
    assert [row["draws"] for row in unsettled] == sorted(
        (row["draws"] for row in unsettled), reverse=True
    )


def test_the_gate_keeps_a_same_model_and_promotes_a_clearly_better_one() -> None:
    base = set(SEEN[:6])
    better = set(SEEN) | set(UNSEEN)
    spread = seed_spread([_report(base), _report(base), _report(better)], TASKS, RULE)

    same, stronger = spread["gate_against_first"]
    assert same["gain"] == 0.0 and not same["promote"]
    assert same["low"] <= 0.0 <= same["high"]
    assert stronger["gain"] > 0.5 and stronger["low"] > 0.0 and stronger["promote"]
    assert all(row["solved"][0] == row["solved"][1] for row in spread["unsettled_templates"])
    assert spread["seen"]["min"] < spread["seen"]["max"]


def test_a_spread_needs_two_runs() -> None:
    with pytest.raises(ValueError, match="at least two runs"):
        seed_spread([_report(set(SEEN))], TASKS, RULE)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One torch thread: the suite runs one xdist worker per core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_small_run_trains_one_version_under_each_seed(prefect_api_url: str) -> None:
    figures = run_seeds_benchmark(
        2,
        12,
        dev_tasks=6,
        base="tiny",
        sft={"max_steps": 3, "batch_size": 1},
        rl={
            "updates": 1,
            "group_size": 2,
            "tasks_per_update": 1,
            "max_steps": 2,
            "max_new_tokens": 16,
            "probe_tasks": 0,
        },
        api=prefect_api_url,
    )

    runs = figures["runs"]
    assert [run["seed"] for run in runs] == [0, 1]
    assert len({run["model_id"] for run in runs}) == 2  # one model per seed
    assert len({run["feedback_id"] for run in runs}) == 2
    assert figures["dataset_id"].startswith("ds-") and figures["dataset_size"] > 0
    assert figures["dev_tasks"] == 6
    rests = figures["seen_concentration"]
    assert 1.0 <= rests["effective_templates"] <= rests["templates"] <= 6
    counts = figures["seen_tasks"]
    assert counts["every"] + counts["some"] + counts["none"] == counts["of"] > 0
    assert len(figures["gate_against_first"]) == 1
    table = seeds_table(figures)
    assert "seed 1: Overall" in table and figures["dataset_id"] not in table
    assert f"CPU: {figures['cpu']}" in table and "torch kernels" in figures["cpu"]
    assert f"the heaviest, {rests['heaviest']}" in table

"""Dataset versions accumulate: a round's proposal holds its parent's members, adds what
was approved, and removes only what a review or a rule removed, each with its reason."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from cli.rounds import diff_text
from contract import (
    DatasetVersion,
    GenerationPlan,
    Outcome,
    RemovalReason,
    Replay,
    Review,
    ReviewDecision,
    Split,
    TemplateWeight,
    Trajectory,
    default_plan,
)
from curation.balance import default_target
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.round_stages import propose_dataset
from flows.settings import catalog_path
from storage import Catalog
from tests.storage.builders import write_shards

TARGET = default_target()


def collect(home: Path, round_id: str, seed: int, sandbox: MobileSandbox) -> list[Trajectory]:
    """A round of scripted successes, stored with the auto gate's approvals."""
    tasks = sample_tasks(24, seed, sandbox, split=Split.TRAIN)
    trajectories = [run_episode(t, sandbox, ScriptedPolicy(), round_id=round_id) for t in tasks]
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.tasks.add(round_id, tasks)
        catalog.trajectories.ingest(write_shards(trajectories, home / "shards" / round_id))
        catalog.reviews.add([approval(t, round_id) for t in trajectories])
    return trajectories


def approval(t: Trajectory, round_id: str) -> Review:
    return Review(
        trajectory_id=t.id,
        round_id=round_id,
        decision=ReviewDecision.APPROVE,
        reviewer="auto",
        automatic=True,
    )


def propose(
    home: Path, round_id: str, trajectories: list[Trajectory], plan: GenerationPlan | None = None
) -> DatasetVersion:
    proposal = propose_dataset(home, round_id, [t.id for t in trajectories], TARGET, plan=plan)
    assert proposal is not None
    with Catalog.open(catalog_path(home)) as catalog:
        version = catalog.datasets.proposal(proposal.version.id)
        catalog.datasets.freeze(version)
    return version


def ids(version: DatasetVersion) -> set[str]:
    return {m.trajectory_id for m in version.members}


def succeeded(t: Trajectory) -> bool:
    return t.metadata.outcome is Outcome.SUCCESS


def successes(trajectories: list[Trajectory]) -> set[str]:
    return {t.id for t in trajectories if succeeded(t)}


@pytest.fixture(scope="module")
def three_rounds(tmp_path_factory: pytest.TempPathFactory, sandbox: MobileSandbox) -> Rounds:
    """Three rounds; between the first and the second a person rejects one of the first
    version's members; the third round's plan down-weights one mastered template and
    preserves one of its tasks."""
    home = tmp_path_factory.mktemp("home")
    rounds = [collect(home, f"round-{n}", seed, sandbox) for n, seed in ((1, 3), (2, 5), (3, 8))]
    first = propose(home, "round-1", rounds[0])
    rejected = next(t for t in rounds[0] if succeeded(t))
    with Catalog.open(catalog_path(home)) as catalog:
        catalog.reviews.add(
            [
                Review(
                    trajectory_id=rejected.id,
                    round_id="round-2",
                    decision=ReviewDecision.REJECT,
                    reviewer="ann",
                    automatic=False,
                    reason="texted the wrong contact",
                )
            ]
        )
    second = propose(home, "round-2", rounds[1])
    template = rounds[0][1].task.template
    same = [
        t
        for r in rounds
        for t in r
        if t.task.template == template and succeeded(t) and t.id != rejected.id
    ]
    assert template is not None and len(same) >= 2
    plan = default_plan(24).model_copy(
        update={
            "template_weights": (TemplateWeight(template=template, weight=0.5, reason="mastered"),),
            "preserve": (Replay(fingerprint=same[0].task.fingerprint, attempts=1),),
        }
    )
    plain = propose_dataset(home, "round-3", [t.id for t in rounds[2]], TARGET)
    assert plain is not None
    with Catalog.open(catalog_path(home)) as catalog:
        unplanned = catalog.datasets.proposal(plain.version.id)
    third = propose(home, "round-3", rounds[2], plan)
    return Rounds(home, [first, second, third], rounds, rejected, unplanned, template, same[0])


@dataclass(frozen=True)
class Rounds:
    home: Path
    versions: list[DatasetVersion]
    trajectories: list[list[Trajectory]]
    rejected: Trajectory
    third_without_plan: DatasetVersion
    mastered: str
    """The template the third round's plan down-weights."""
    preserved: Trajectory
    """A trajectory of that template whose task the plan preserves."""


def test_each_version_holds_its_parents_members_and_adds_the_approved(
    three_rounds: Rounds,
) -> None:
    (first, second, third), rounds = three_rounds.versions, three_rounds.trajectories
    rejected = three_rounds.rejected
    assert ids(first) == successes(rounds[0])
    assert second.parent == first.id and third.parent == second.id
    assert ids(second) == (ids(first) - {rejected.id}) | successes(rounds[1])
    assert ids(third) == ids(second) | successes(rounds[2])
    assert second.inherited == len(first.members) - 1
    assert third.inherited == len(second.members)


def test_a_removal_is_recorded_with_its_reason(
    three_rounds: Rounds,
) -> None:
    home, (first, second, third) = three_rounds.home, three_rounds.versions
    rejected = three_rounds.rejected
    (removal,) = second.removed
    assert removal.trajectory_id == rejected.id
    assert removal.reason is RemovalReason.REJECTED
    assert "ann" in removal.detail and "wrong contact" in removal.detail
    assert third.removed == ()
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        stored = catalog.datasets.get(second.id)
        changes = catalog.datasets.diff(first.id, third.id)
    assert stored.removed == second.removed and stored.id == second.id
    (explained,) = changes["members"]["removals"]
    assert explained["reason"] == "rejected" and explained["dataset_id"] == second.id
    assert {a["trajectory_id"] for a in changes["members"]["additions"]} == ids(third) - ids(first)
    text = diff_text(changes)
    assert "removed: 1 rejected (reject by ann: texted the wrong contact)" in text
    assert "approved automatically in round-2" in text


def test_mastered_templates_are_down_weighted_but_the_preservation_set_is_not(
    three_rounds: Rounds,
) -> None:
    """The third version against the same proposal without the plan: the mastered
    template's members weigh half as much relative to the rest; the preserved task's do
    not change relative to the rest."""
    third, plain = three_rounds.versions[2], three_rounds.third_without_plan
    assert ids(third) == ids(plain)
    tasks = {t.id: t.task for r in three_rounds.trajectories for t in r}
    ratio = {m.trajectory_id: m.weight for m in third.members}
    for m in plain.members:
        ratio[m.trajectory_id] /= m.weight
    mastered = [
        r
        for t, r in ratio.items()
        if tasks[t].template == three_rounds.mastered
        and tasks[t].fingerprint != three_rounds.preserved.task.fingerprint
    ]
    others = [r for t, r in ratio.items() if tasks[t].template != three_rounds.mastered]
    assert mastered and others
    for r in mastered:
        assert r == pytest.approx(0.5 * others[0], rel=1e-3)
    assert all(r == pytest.approx(others[0], rel=1e-3) for r in others)
    assert ratio[three_rounds.preserved.id] == pytest.approx(others[0], rel=1e-3)

"""What a round's summary counts, read from the catalog's columns: the round's stages pass
ids between them, never lists of records, so its memory does not grow with its size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import duckdb

from contract import Outcome, ReviewDecision
from contract.curation import APPROVING, CONSENSUS_REVIEWER_PREFIX
from storage.sql import scalar


class EpisodeFacts(NamedTuple):
    """One stored trajectory of a round, as its summary counts it."""

    id: str
    outcome: str
    backend: str
    device: str | None
    capabilities: list[str]
    """Its task's."""
    artifacts: int
    """Screenshots and page sources kept, over its steps."""


EPISODE_QUERY = """
SELECT t.id, t.outcome, t.backend, t.device, k.capabilities,
       coalesce(a.artifacts, 0) AS artifacts
FROM trajectories t
JOIN tasks k ON k.id = t.task_id
LEFT JOIN (
    SELECT trajectory_id, sum(len(artifacts)) AS artifacts FROM steps
    WHERE trajectory_id IN (SELECT id FROM trajectories WHERE round_id = $round)
    GROUP BY trajectory_id
) a ON a.trajectory_id = t.id
WHERE t.round_id = $round
ORDER BY t.id
"""


def episode_facts(con: duckdb.DuckDBPyConnection, round_id: str) -> list[EpisodeFacts]:
    """Every trajectory ``round_id`` stored, by id."""
    rows = con.execute(EPISODE_QUERY, {"round": round_id}).fetchall()
    return [
        EpisodeFacts(
            id=trajectory_id,
            outcome=outcome,
            backend=backend,
            device=device,
            capabilities=list(capabilities),
            artifacts=int(artifacts),
        )
        for trajectory_id, outcome, backend, device, capabilities, artifacts in rows
    ]


def task_capabilities(con: duckdb.DuckDBPyConnection, round_id: str) -> list[list[str]]:
    """The capabilities of each task first constructed in ``round_id``."""
    rows = con.execute("SELECT capabilities FROM tasks WHERE round_id = ?", [round_id])
    return [list(capabilities) for (capabilities,) in rows.fetchall()]


class CapabilityTally(NamedTuple):
    """A round's counts for one capability (a task of several counts in each)."""

    tasks: int
    trajectories: int
    successes: int
    approved: int
    in_dataset: int


class RoundTally(NamedTuple):
    """What a round's summary counts, each a count the catalog makes (no record is read)."""

    constructed: int
    rejected_tasks: int
    collected: int
    backend_errors: int
    curated: int
    """Kept by the curator."""
    approved: int
    """Kept, and approved by the review that counts (``Review``'s docstring)."""
    rejected: int
    """Kept, and decided otherwise."""
    pending: int
    """Kept, and not decided yet."""
    carried_in_approved: int
    """Reviewed, not kept by this round's curator (items carried in), approved."""
    in_dataset: int
    capabilities: dict[str, CapabilityTally]
    """Only the capabilities the round has tasks or trajectories of."""


THE_REVIEW_THAT_COUNTS = f"""row_number() OVER (
        PARTITION BY trajectory_id
        ORDER BY CASE WHEN automatic THEN 0
                      WHEN starts_with(reviewer, '{CONSENSUS_REVIEWER_PREFIX}') THEN 2
                      ELSE 1 END DESC,
                 created_at DESC, rowid DESC
    ) = 1"""
"""A ``QUALIFY`` condition over ``reviews`` that keeps, per trajectory, the review that
counts (``Review``'s docstring; ``human_gate.final_decisions`` over records)."""

_FINAL_REVIEWS = f"""
kept AS (
    SELECT trajectory_id AS id FROM curations WHERE round_id = $round AND kept
), final AS (
    SELECT trajectory_id AS id, list_contains($approving, decision) AS approves,
           trajectory_id IN (SELECT id FROM kept) AS kept, decision, automatic
    FROM reviews
    WHERE round_id = $round OR list_contains($carried, trajectory_id)
    QUALIFY {THE_REVIEW_THAT_COUNTS}
), members AS (
    SELECT trajectory_id AS id FROM dataset_members WHERE dataset_id = $dataset
)"""

TALLY_QUERY = f"""
WITH {_FINAL_REVIEWS}
SELECT (SELECT count(*) FROM tasks WHERE round_id = $round),
       (SELECT count(*) FROM rejected_tasks WHERE round_id = $round),
       (SELECT count(*) FROM trajectories WHERE round_id = $round),
       (SELECT count(*) FROM trajectories WHERE round_id = $round AND outcome = $backend_error),
       (SELECT count(*) FROM kept),
       (SELECT count(*) FILTER (WHERE kept AND approves) FROM final),
       (SELECT count(*) FILTER (WHERE kept AND NOT approves) FROM final),
       (SELECT count(*) FILTER (WHERE NOT kept AND approves) FROM final),
       (SELECT count(*) FROM members)
"""

CAPABILITY_QUERY = f"""
WITH {_FINAL_REVIEWS}, episodes AS (
    SELECT t.id, t.outcome, unnest(list_distinct(k.capabilities)) AS capability
    FROM trajectories t JOIN tasks k ON k.id = t.task_id
    WHERE t.round_id = $round
), per_episode AS (
    SELECT e.capability, count(*) AS trajectories,
           count(*) FILTER (WHERE e.outcome = $success) AS successes,
           count(f.id) AS approved, count(m.id) AS in_dataset
    FROM episodes e
    LEFT JOIN final f ON f.id = e.id AND f.kept AND f.approves
    LEFT JOIN members m ON m.id = e.id
    GROUP BY e.capability
), per_task AS (
    SELECT capability, count(*) AS tasks
    FROM (SELECT unnest(capabilities) AS capability FROM tasks WHERE round_id = $round)
    GROUP BY capability
)
SELECT coalesce(e.capability, t.capability), coalesce(t.tasks, 0),
       coalesce(e.trajectories, 0), coalesce(e.successes, 0), coalesce(e.approved, 0),
       coalesce(e.in_dataset, 0)
FROM per_episode e FULL JOIN per_task t ON t.capability = e.capability
"""


def _final_review_params(
    round_id: str, carried_in: Sequence[str], dataset_id: str | None
) -> dict[str, object]:
    """The parameters ``_FINAL_REVIEWS`` reads."""
    return {
        "round": round_id,
        "carried": sorted(set(carried_in)),
        "dataset": dataset_id,
        "approving": sorted(decision.value for decision in APPROVING),
    }


GATE_QUERY = f"""
WITH {_FINAL_REVIEWS}
SELECT decision, automatic, count(*) FROM final WHERE kept GROUP BY ALL
"""


class GateCounts(NamedTuple):
    """Where a round's kept items stand at its gate, by the review that counts."""

    kept: int
    decisions: dict[str, int]
    """Decided items per decision (every ``ReviewDecision`` value, 0 when none)."""
    human: int
    """Decided by a person (or a consensus of people), not automatically."""

    @property
    def undecided(self) -> int:
        return self.kept - sum(self.decisions.values())


def gate_counts(con: duckdb.DuckDBPyConnection, round_id: str) -> GateCounts:
    """``round_id``'s kept items by their final review (its own reviews only)."""
    rows = con.execute(GATE_QUERY, _final_review_params(round_id, (), None)).fetchall()
    kept = scalar(con, "SELECT count(*) FROM curations WHERE round_id = ? AND kept", [round_id])
    decisions = dict.fromkeys((d.value for d in ReviewDecision), 0)
    for decision, _, count in rows:
        decisions[decision] += count
    return GateCounts(
        kept=kept,
        decisions=decisions,
        human=sum(count for _, automatic, count in rows if not automatic),
    )


def round_tally(
    con: duckdb.DuckDBPyConnection,
    round_id: str,
    carried_in: Sequence[str],
    dataset_id: str | None,
) -> RoundTally:
    """The counts of ``round_id``'s summary; ``carried_in``: the items taken up from
    earlier rounds (their reviews count whichever round made them); ``dataset_id``: the
    version the round froze, if any."""
    params = _final_review_params(round_id, carried_in, dataset_id)
    row = con.execute(
        TALLY_QUERY, {**params, "backend_error": Outcome.BACKEND_ERROR.value}
    ).fetchone()
    assert row is not None  # an aggregate without GROUP BY has its one row
    constructed, rejected_tasks, collected, errors, kept, approved, rejected, carried, members = row
    rows = con.execute(CAPABILITY_QUERY, {**params, "success": Outcome.SUCCESS.value}).fetchall()
    return RoundTally(
        constructed=constructed,
        rejected_tasks=rejected_tasks,
        collected=collected,
        backend_errors=errors,
        curated=kept,
        approved=approved,
        rejected=rejected,
        pending=kept - approved - rejected,
        carried_in_approved=carried,
        in_dataset=members,
        capabilities={name: CapabilityTally(*counts) for name, *counts in rows},
    )

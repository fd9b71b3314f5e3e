"""What a round's summary counts, read from the catalog's columns: the round's stages pass
ids between them, never lists of records, so its memory does not grow with its size."""

from __future__ import annotations

from typing import NamedTuple

import duckdb


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

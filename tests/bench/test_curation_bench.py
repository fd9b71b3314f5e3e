"""The curation benchmark runs the round's stages end to end on a small synthetic round."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench.curation import ROUND, report, run_stages, tree_rss
from bench.synthetic import synthetic_round
from flows.settings import catalog_path
from storage import Catalog


def test_the_stages_run_in_order_on_every_trajectory_and_report_figures(tmp_path: Path) -> None:
    home = tmp_path / "home"
    data = synthetic_round(catalog_path(home), ROUND, 400, seed=2, workdir=tmp_path / "work")

    stages = run_stages(home, tmp_path / "export")

    names = [s.name for s in stages]
    assert names == [
        "curate",
        "gate (automatic)",
        "balance",
        "freeze",
        "export (hf)",
        "export (parquet)",
    ]
    counts = {s.name: s.items for s in stages}
    assert counts["curate"] == data.trajectories
    with Catalog.open(catalog_path(home), read_only=True) as catalog:
        (dataset,) = catalog.datasets.summaries()
        assert len(catalog.reviews.curations_of_round(ROUND)) == data.trajectories
        assert len(catalog.reviews.of_round(ROUND)) == counts["gate (automatic)"]
    assert counts["freeze"] == counts["export (hf)"] == counts["export (parquet)"] == dataset.size
    assert all(s.peak_bytes > 0 and s.seconds > 0 and s.cpu_seconds > 0 for s in stages)
    measured = report(data, stages)
    text = measured.text
    assert "curate → export (hf)" in text and "400 trajectories" in text
    cpu = sum(s.cpu_seconds for s in stages if s.name != "export (parquet)")
    assert f"(CPU {cpu:.1f} s)" in text
    figures = json.loads(json.dumps(measured.figures))  # JSON as it is
    assert [s["name"] for s in figures["stages"]] == names
    assert figures["curate_to_export_hf"]["cpu_s"] == cpu
    assert figures["round"]["trajectories"] == 400 and "catalog_path" not in figures["round"]
    assert figures["machine"]["cores"] == os.cpu_count()


def test_tree_rss_counts_this_process_and_nothing_for_a_gone_one() -> None:
    assert tree_rss(os.getpid()) > 10 * 2**20
    assert tree_rss(2**22 + 12345) == 0

"""A round whose collection shards and curation partitions, and an export whose chunks,
run on a Ray cluster, started here as a user starts one (``ray start --head`` on
127.0.0.1, 2 CPUs): the same dataset and the same export as on threads and worker
processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from flows.servers import free_port
from tests.flows.commands import flywheel_json, run_round

RAY = str(Path(sys.executable).parent / "ray")


@pytest.fixture(scope="module")
def ray_cluster(prefect_api_url: str) -> Iterator[tuple[str, str]]:
    """The address and dashboard URL of a local Ray cluster, stopped at the end (``ray
    stop`` stops every Ray process of this user: the suite starts no other)."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    port, dashboard = free_port(), free_port()
    env = os.environ | {"RAY_USAGE_STATS_ENABLED": "0", "PREFECT_API_URL": prefect_api_url}
    started = subprocess.run(
        [
            RAY,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            "--object-store-memory=100000000",
            f"--temp-dir={temp}",
            "--disable-usage-stats",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}"
    finally:
        subprocess.run(
            [RAY, "stop", "--force"], env=env, capture_output=True, timeout=120, check=False
        )
        shutil.rmtree(temp, ignore_errors=True)


def finished(dashboard: str, name: str, expected: int) -> int:
    """Ray's count of its finished tasks called ``name`` (task events arrive late)."""
    from ray.util.state import list_tasks

    count = 0
    for _ in range(60):
        tasks = list_tasks(
            address=dashboard,
            filters=[("name", "=", name), ("state", "=", "FINISHED")],
            limit=1000,
            raise_on_missing_output=False,
        )
        count = len(tasks)
        if count >= expected:
            break
        time.sleep(0.5)
    return count


@pytest.mark.slow
@pytest.mark.cluster
def test_a_round_on_ray_makes_the_dataset_the_threads_make(
    ray_cluster: tuple[str, str], prefect_api_url: str, tmp_path: Path
) -> None:
    address, dashboard = ray_cluster
    args = ("--tasks", "24", "--seed", "4", "--round-id", "same")
    small = {"FLYWHEEL_ROUND__SHARD_SIZE": "6", "FLYWHEEL_CURATION__PARTITION_SIZE": "8"}
    on_ray = run_round(
        tmp_path / "ray",
        prefect_api_url,
        *args,
        FLYWHEEL_EXECUTION__RUNNER="ray",
        FLYWHEEL_EXECUTION__ADDRESS=address,
        **small,
    )
    on_threads = run_round(tmp_path / "threads", prefect_api_url, *args, **small)

    assert finished(dashboard, "collect-shard", 4) == 4  # the shards ran on the cluster
    assert finished(dashboard, "curate-partition", 3) >= 3  # and so did the partitions
    assert on_ray["counts"]["collected"] >= 24
    assert on_ray["counts"] == on_threads["counts"]
    assert on_ray["dataset_version"] == on_threads["dataset_version"]  # content-derived ids
    shards = sorted(p.name for p in (tmp_path / "ray").rglob("shard-*.parquet"))
    assert shards == sorted(p.name for p in (tmp_path / "threads").rglob("shard-*.parquet"))
    assert len(shards) == 4
    dataset = on_ray["dataset_version"]
    on_cluster = _export(
        tmp_path / "ray",
        prefect_api_url,
        dataset,
        FLYWHEEL_EXECUTION__RUNNER="ray",
        FLYWHEEL_EXECUTION__ADDRESS=address,
    )
    in_processes = _export(tmp_path / "threads", prefect_api_url, dataset)
    chunks = -(-on_ray["counts"]["in_dataset"] // 5)
    assert chunks > 1
    assert finished(dashboard, "export-chunk", chunks) == chunks  # the chunks ran there
    assert on_cluster == in_processes


def _export(home: Path, api: str, dataset: str, **extra: str) -> dict[str, list[dict[str, Any]]]:
    """``flywheel datasets export --chunk 5`` (with the settings ``extra``): the rows of
    each exported Parquet file, by name."""
    out = home / "export"
    report = flywheel_json(
        home,
        api,
        *("datasets", "export", dataset, "--out", str(out), "--format", "parquet"),
        *("--chunk", "5"),
        **extra,
    )
    assert report["sft_rows"] > 5
    return {p.name: pq.read_table(p).to_pylist() for p in sorted(out.rglob("*.parquet"))}

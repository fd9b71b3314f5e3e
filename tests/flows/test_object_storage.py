"""A round whose shards live in object storage: a local S3-compatible server (moto in
server mode on 127.0.0.1), reached through fsspec (s3fs) as a real bucket would be."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.servers import free_port
from storage import ArtifactStore, Catalog
from tests.flows.commands import run_round

MOTO = str(Path(sys.executable).parent / "moto_server")
BUCKET = "flywheel-shards"


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """The variables that point s3fs at a fresh moto server with an empty bucket."""
    port = free_port()
    server = subprocess.Popen(
        [MOTO, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": url,
        }
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            import s3fs

            s3fs.S3FileSystem.clear_instance_cache()
            s3fs.S3FileSystem().mkdir(BUCKET)
            yield env
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.cluster
def test_a_round_writes_its_shards_to_the_bucket_and_ingests_them_from_there(
    s3_env: dict[str, str], prefect_api_url: str, tmp_path: Path
) -> None:
    import s3fs

    args = ("--tasks", "12", "--seed", "6", "--round-id", "bucketed")
    remote = run_round(
        tmp_path / "remote",
        prefect_api_url,
        *args,
        FLYWHEEL_STORAGE__SHARDS=f"s3://{BUCKET}/rounds",
        FLYWHEEL_ROUND__SHARD_SIZE="5",
        **s3_env,
    )
    local = run_round(tmp_path / "local", prefect_api_url, *args, FLYWHEEL_ROUND__SHARD_SIZE="5")

    assert remote["dataset_version"] == local["dataset_version"]
    assert remote["counts"] == local["counts"]
    s3fs.S3FileSystem.clear_instance_cache()
    stored = sorted(s3fs.S3FileSystem().ls(f"{BUCKET}/rounds/bucketed/shards"))
    assert [Path(p).name for p in stored] == [f"shard-{i:05d}.parquet" for i in range(3)]
    assert not list((tmp_path / "remote").rglob("*.parquet"))  # nothing landed locally
    with Catalog.open(tmp_path / "remote" / "catalog.duckdb", read_only=True) as catalog:
        assert catalog.trajectories.count("bucketed") == remote["counts"]["collected"]


@pytest.mark.slow
@pytest.mark.cluster
def test_a_device_round_keeps_its_screenshots_and_shards_in_the_bucket(
    s3_env: dict[str, str], prefect_api_url: str, appium_url: str, tmp_path: Path
) -> None:
    """End to end on a device pool (Appium's fake driver): every screenshot and page
    source a step references is an object in the bucket, and nothing is on local disk."""
    pool = json.dumps([{"name": "fake-0", "server": appium_url}])
    artifacts = f"s3://{BUCKET}/artifacts"
    out = run_round(
        tmp_path,
        prefect_api_url,
        *("--tasks", "48", "--seed", "5", "--devices", "gui", "--backend-fault-rate", "0"),
        FLYWHEEL_DEVICES__POOL=pool,
        FLYWHEEL_DEVICES__LEASE_TIMEOUT_S="60",
        FLYWHEEL_STORAGE__ARTIFACTS=artifacts,
        FLYWHEEL_STORAGE__SHARDS=f"s3://{BUCKET}/device-rounds",
        **s3_env,
    )
    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        trajectories = catalog.trajectories.of_round(out["round_id"])
    refs = {ref for t in trajectories for step in t.steps for ref in step.artifacts}
    assert {Path(ref).suffix for ref in refs} >= {".png", ".xml"}
    store = ArtifactStore(artifacts)
    assert all(ref in store for ref in refs)
    screenshot = next(ref for ref in sorted(refs) if ref.endswith(".png"))
    assert store.get(screenshot)[:4] == b"\x89PNG"
    assert not (tmp_path / "artifacts").exists()
    assert not list(tmp_path.rglob("*.parquet"))

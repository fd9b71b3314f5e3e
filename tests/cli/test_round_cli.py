"""Bad input to the round commands: a clear message, exit 1, and the catalog untouched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import duckdb
import pytest

from storage import Catalog
from storage.migrations import SCHEMA_VERSION
from tests.cli.commands import run_in


def run(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # No Prefect server is involved: every case must fail before a flow run starts.
    no_server = {"PREFECT_API_URL": "http://127.0.0.1:9/api"}
    return run_in(home, *args, timeout=60, in_home=False, **(no_server | env))


def _fails(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 1, no traceback; the refusal on stderr, or with ``--json`` as a JSON error on
    stdout."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    said = result.stderr
    if "--json" in result.args:
        said = json.dumps(json.loads(result.stdout)["error"])
    for needle in needles:
        assert needle in said, said


def test_listing_without_a_catalog_says_to_run_a_round(tmp_path: Path) -> None:
    _fails(run(tmp_path, "rounds", "list", "--json"), "no catalog", "run a round")
    _fails(run(tmp_path, "datasets", "list"), "no catalog")
    assert not (tmp_path / "catalog.duckdb").exists()


def test_a_corrupt_catalog_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.duckdb"
    catalog.write_bytes(b"this is not a database" * 100)
    before = catalog.read_bytes()
    _fails(run(tmp_path, "datasets", "list"), str(catalog))
    _fails(run(tmp_path, "round", "--tasks", "12"), str(catalog))
    assert catalog.read_bytes() == before


def test_a_catalog_from_newer_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog.open(path).close()
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    [str(SCHEMA_VERSION + 1)])  # fmt: skip
    before = path.read_bytes()
    _fails(run(tmp_path, "round", "--tasks", "12"), "newer", str(SCHEMA_VERSION + 1))
    _fails(run(tmp_path, "rounds", "list"), "newer")
    assert path.read_bytes() == before


def test_an_unusable_state_folder_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    _fails(run(blocker / "home", "round", "--tasks", "12"), str(blocker / "home"))


def test_contradictory_settings_name_the_field(tmp_path: Path) -> None:
    result = run(tmp_path, "round", "--tasks", "12", FLYWHEEL_CURATION__REJECT_QUALITY="0.9")
    _fails(result, "curation", "reject_quality", "approve_quality")
    toml = tmp_path / "flywheel.toml"
    toml.write_text("[balance]\ncapability = { tool_use = 0.5, memory = 0.2 }\n")
    _fails(run(tmp_path, "round", FLYWHEEL_CONFIG=str(toml)), "balance", "sum to 0.7")
    toml.write_text("[round]\ntasks = 10\nshard_sise = 4\n")
    _fails(run(tmp_path, "round", FLYWHEEL_CONFIG=str(toml)), "shard_sise")
    assert not (tmp_path / "catalog.duckdb").exists()


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [("--policy", "magic", "scripted, openai"), ("--gate", "mturk", "auto")],
)
def test_unknown_policy_or_gate_lists_the_allowed(
    tmp_path: Path, option: str, value: str, allowed: str
) -> None:
    _fails(run(tmp_path, "round", option, value), value, allowed)


def test_an_unknown_dataset_id_names_the_known_ones(tmp_path: Path) -> None:
    Catalog.open(tmp_path / "catalog.duckdb").close()
    _fails(run(tmp_path, "datasets", "show", "ds-nope", "--json"), "ds-nope")


@pytest.mark.parametrize(
    "command",
    [
        ["datasets", "show", "latest"],
        ["datasets", "diff", "ds-0f666b5c80a3e5dd9ca6", "latest"],
        ["datasets", "export", "latest", "--out", "{out}"],
    ],
)
def test_latest_without_a_version_says_to_run_a_round(tmp_path: Path, command: list[str]) -> None:
    Catalog.open(tmp_path / "catalog.duckdb").close()
    out = tmp_path / "exported"
    args = [word.replace("{out}", str(out)) for word in command]
    _fails(run(tmp_path, *args, "--json"), "no dataset version yet", "run a round first")
    assert not out.exists()


def test_an_unreachable_prefect_api_is_named(tmp_path: Path) -> None:
    _fails(run(tmp_path, "round", "--tasks", "12"), "127.0.0.1:9", "does not answer")

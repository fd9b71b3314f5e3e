"""The ``flywheel`` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")


def run(
    *args: str, check: bool = True, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``flywheel args``; ``home``: the state folder (FLYWHEEL_HOME) it runs with."""
    env = {**os.environ, "FLYWHEEL_HOME": str(home)} if home is not None else None
    result = subprocess.run(
        [FLYWHEEL, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_templates_lists_names_capabilities_difficulty_domains_split() -> None:
    items = json.loads(run("tasks", "templates", "--json").stdout)
    assert len(items) >= 40
    for item in items:
        assert set(item) == {"name", "capabilities", "difficulty", "domains", "split"}
    assert {i["split"] for i in items} == {"train", "dev"}


def test_sample_is_byte_identical_for_a_seed_and_honours_filters() -> None:
    args = ("tasks", "sample", "--n", "8", "--seed", "42", "--capability", "skills", "--json")
    first = run(*args).stdout
    assert first == run(*args).stdout
    tasks = json.loads(first)
    assert len(tasks) == 8
    for task in tasks:
        assert {"id", "fingerprint", "goal", "capabilities", "difficulty", "tools", "verifier",
                "split"} <= set(task)  # fmt: skip
        assert "skills" in task["capabilities"]
        assert all(isinstance(name, str) for name in task["tools"])
    other = run("tasks", "sample", "--n", "8", "--seed", "43", "--capability", "skills", "--json")
    assert other.stdout != first


def test_split_filter_never_leaks_dev_into_train() -> None:
    train = json.loads(run("tasks", "sample", "--n", "60", "--seed", "1", "--split", "train",
                           "--json").stdout)  # fmt: skip
    dev = json.loads(run("tasks", "sample", "--n", "30", "--seed", "1", "--split", "dev",
                         "--json").stdout)  # fmt: skip
    assert {t["split"] for t in train} == {"train"}
    assert {t["split"] for t in dev} == {"dev"}
    assert not {t["fingerprint"] for t in train} & {t["fingerprint"] for t in dev}


def test_episode_json_is_byte_identical_and_complete() -> None:
    args = ("episode", "--n", "6", "--seed", "3", "--policy", "scripted", "--fault-rate", "0.5",
            "--json")  # fmt: skip
    first = run(*args).stdout
    assert first == run(*args).stdout
    trajectories = json.loads(first)
    assert len(trajectories) == 6
    for t in trajectories:
        assert {"task", "steps", "verdict", "cost", "metadata"} <= set(t)
        assert {"passed", "score", "progress"} <= set(t["verdict"])
        assert t["metadata"]["policy"]["name"] == "scripted"


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("tasks", "sample", "--capability", "flying"), ["--capability", "tool_use", "subagent"]),
        (("tasks", "sample", "--difficulty", "extreme"), ["--difficulty", "easy", "hard"]),
        (("tasks", "sample", "--split", "test"), ["--split", "train", "dev"]),
        (("episode", "--policy", "oracle"), ["policy", "scripted", "openai"]),
        (("episode", "--fault-rate", "1.5"), ["--fault-rate"]),
        (("tasks", "sample", "--n", "-1"), ["--n"]),
    ],
)
def test_bad_input_exits_non_zero_naming_the_field(args: tuple[str, ...], names: list[str]) -> None:
    result = run(*args, check=False)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    for name in names:
        assert name in result.stderr


@pytest.mark.parametrize(
    ("args", "field", "allowed", "code"),
    [
        (("episode", "--policy", "oracle"), "policy", ["scripted", "openai", "champion"], 1),
        (("tasks", "sample", "--n", "-1"), "--n", None, 2),  # refused by the option itself
        (("tasks", "sample", "--capability", "flying"), "--capability", None, 2),
    ],
)
def test_with_json_a_refusal_is_json_naming_the_field(
    args: tuple[str, ...], field: str, allowed: list[str] | None, code: int
) -> None:
    result = run(*args, "--json", check=False)
    assert result.returncode == code
    error = json.loads(result.stdout)["error"]
    assert error["field"] == field and error["problem"]
    assert error["allowed"] == allowed
    assert "Traceback" not in result.stderr


def test_validate_refuses_a_malformed_verifier_spec(tmp_path: Path) -> None:
    task = json.loads(run("tasks", "sample", "--n", "1", "--seed", "5", "--json").stdout)[0]
    good = tmp_path / "good.json"
    good.write_text(json.dumps(task))
    assert json.loads(run("tasks", "validate", str(good), "--json").stdout)[0]["reference_passes"]

    task.pop("id")
    task["verifier"]["checks"][0]["expect"] = "perhaps"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(task))
    result = run("tasks", "validate", str(bad), check=False)
    assert result.returncode == 1
    assert "verifier.checks.0" in result.stderr and "expect" in result.stderr
    assert "Traceback" not in result.stderr

    missing = run("tasks", "validate", str(tmp_path / "nope.json"), check=False)
    assert missing.returncode == 1 and "no such file" in missing.stderr


def test_contract_schema_prints_every_record() -> None:
    schemas = json.loads(run("contract", "schema").stdout)
    assert {"TaskSpec", "Trajectory", "Action", "VerifierSpec", "Verdict"} <= set(schemas)


def test_episode_prints_a_summary_per_capability() -> None:
    out = run("episode", "--n", "24", "--seed", "2").stdout
    for capability in ("tool_use", "memory", "skills", "subagent"):
        assert capability in out
    assert "success" in out and "mean steps" in out


def test_openai_policy_is_configured_from_the_environment() -> None:
    import os

    from tests.fakes.chat_server import ScriptedChatServer, text_reply

    secret = "sk-test-0123456789abcdef"
    with ScriptedChatServer([text_reply("Let me think.")]) as server:
        env = {
            **os.environ,
            "FLYWHEEL_POLICY__BASE_URL": server.base_url,
            "FLYWHEEL_POLICY__MODEL": "planner-test",
            "FLYWHEEL_POLICY__API_KEY": secret,
        }
        result = subprocess.run(
            [FLYWHEEL, "episode", "--n", "1", "--seed", "4", "--policy", "openai", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        requests = server.requests
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout and secret not in result.stderr
    [trajectory] = json.loads(result.stdout)
    assert trajectory["metadata"]["policy"] == {
        "name": "openai",
        "version": "planner-test",
        "model": "planner-test",
    }
    first, second = trajectory["steps"][:2]
    assert first["feedback"]["error"]["kind"] == "malformed_output"
    assert second["action"]["kind"] == "finish"
    assert requests[0]["model"] == "planner-test"


def test_development_reports_the_stored_set_or_a_draw(tmp_path: Path) -> None:
    from contract import Split
    from envs.sandbox import MobileSandbox
    from envs.sandbox.templates.catalog import sample_tasks
    from flows.settings import catalog_path
    from storage import Catalog

    def development(*extra: str) -> dict[str, Any]:
        done = run("tasks", "development", "--json", *extra, home=tmp_path)
        return cast("dict[str, Any]", json.loads(done.stdout))

    drawn = development("--size", "40", "--seed", "3")
    assert drawn["source"].startswith("drawn: 40 tasks, seed 3")
    seen = drawn["parts"]["seen"]["overall"]
    assert seen["tasks"] + drawn["parts"]["unseen"]["overall"]["tasks"] == 40
    assert 1.0 <= seen["effective_templates"] <= seen["templates"]

    stored = sample_tasks(12, 5, MobileSandbox(), split=Split.DEV)
    with Catalog.open(catalog_path(tmp_path)) as catalog:
        catalog.tasks.add(None, stored)
    kept = development()
    assert kept["source"].startswith("stored in ")
    counted = sum(part["overall"]["tasks"] for part in kept["parts"].values())
    assert counted == len({t.fingerprint for t in stored})

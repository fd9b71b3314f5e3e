"""``flywheel eval --suite bfcl-multi-turn``: a policy's accuracy per BFCL category, by our
verifier and by BFCL's checker, for the scripted policy, the OpenAI-compatible policy
against a fake endpoint (the project's scripted chat server) and the champion on the
local model server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.policies.chat_format import action_call
from agents.policies.scripted import ScriptedPolicy
from contract import InvalidInputError
from envs.bfcl.backend import task_spec
from envs.bfcl.tasks import load_tasks
from tests.fakes import ScriptedChatServer, tool_call_reply
from tests.serving.builders import SERVED_ID, SERVED_NAME, model_folders, running_server
from training.bfcl_suite import run_suite

FLYWHEEL = str(Path(sys.executable).with_name("flywheel"))
EVAL_BASE = (FLYWHEEL, "eval", "--suite", "bfcl-multi-turn", "--category", "base")


def test_the_scripted_policy_scores_every_category_fully_by_both_checkers() -> None:
    scores = run_suite(ScriptedPolicy(), limit=3)
    assert [(s.category, s.tasks, s.passed, s.bfcl_valid) for s in scores] == [
        ("base", 3, 3, 3),
        ("long_context", 3, 3, 3),
        ("miss_func", 3, 3, 3),
        ("miss_param", 3, 3, 3),
    ]
    with pytest.raises(InvalidInputError, match="category"):
        run_suite(ScriptedPolicy(), ["memory_kv"])


def test_an_openai_compatible_endpoint_is_scored_by_both_checkers(tmp_path: Path) -> None:
    """The fake endpoint replies with the first base task's ground truth, call by call,
    then finishes every turn of the second at once: one right, one wrong, both ways."""
    first = task_spec(load_tasks("base")[0])
    replies = [tool_call_reply(*_call(action)) for action in first.reference_plan]
    with ScriptedChatServer(replies) as server:
        env = {
            **os.environ,
            "FLYWHEEL_HOME": str(tmp_path),
            "FLYWHEEL_POLICY__BASE_URL": server.base_url,
            "FLYWHEEL_POLICY__MODEL": "planner-test",
        }
        result = subprocess.run(
            [
                FLYWHEEL,
                "eval",
                "--policy",
                "openai",
                "--category",
                "base",
                "--limit",
                "2",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
        )
        sent = server.requests
    assert result.returncode == 0, result.stderr
    (base,) = json.loads(result.stdout)["categories"]
    assert (base["tasks"], base["passed"], base["bfcl_valid"]) == (2, 1, 1)
    assert base["disagreements"] == []
    offered = {t["function"]["name"] for t in sent[0]["tools"]}
    assert {"mv", "post_tweet"} <= offered
    later = [
        m["content"] for m in sent[len(first.reference_plan) - 1]["messages"] if m["role"] == "user"
    ]
    assert later == [first.goal, *first.follow_ups], "every user turn was heard by the end"


def _call(action: object) -> tuple[str, str]:
    name, arguments = action_call(action)  # type: ignore[arg-type]
    return name, json.dumps(arguments)


def test_the_champion_on_the_local_model_server_is_scored(tmp_path: Path) -> None:
    """An untrained tiny model served by ``python -m serving``: the suite runs through the
    served champion and both checkers score its episode alike (a failure)."""
    (folder,) = model_folders(tmp_path / "models", (0,))
    with running_server(folder, SERVED_ID, SERVED_NAME, tmp_path / "serving.log") as server:
        env = {
            **os.environ,
            "FLYWHEEL_HOME": str(tmp_path / "home"),
            "FLYWHEEL_SERVING__PORT": server.base_url.rsplit(":", 1)[1],
        }
        result = subprocess.run(
            [*EVAL_BASE, "--policy", "champion", "--limit", "1", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
        )
    assert result.returncode == 0, result.stderr
    (base,) = json.loads(result.stdout)["categories"]
    assert (base["tasks"], base["passed"], base["bfcl_valid"], base["disagreements"]) == (
        1,
        0,
        0,
        [],
    )

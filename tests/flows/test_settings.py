"""Settings: the README's example file loads, and bad values name their field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract import FlywheelError
from flows.planning import next_plan
from flows.settings import load_settings
from storage import Catalog
from tests.curation.test_planning import report, stats, tasks_of

README = Path(__file__).parents[2] / "README.md"


def _readme_tomls() -> list[str]:
    """The README's settings examples: the whole file first, then sections of it."""
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 2
    return [str(b) for b in blocks]


def _readme_toml() -> str:
    return _readme_tomls()[0]


def test_the_readme_settings_file_loads_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "flywheel.toml"
    path.write_text(_readme_toml())
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(path))
    monkeypatch.delenv("FLYWHEEL_HOME", raising=False)
    settings = load_settings()
    assert settings.round.shard_size == 200 and settings.curation.audit_rate == 0.0
    assert settings.balance.target().recovery_share == 0.2
    assert settings.agent_llm.endpoint is not None
    assert settings.agent_llm.endpoint.model == "judge"


def test_the_readme_device_pool_loads_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [devices] = [b for b in _readme_tomls() if b.startswith("[devices]")]
    path = tmp_path / "flywheel.toml"
    path.write_text(devices)
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(path))
    settings = load_settings()
    assert settings.devices.route == "gui"
    fake, phone = settings.devices.pool
    assert (fake.name, fake.driver, fake.server) == ("fake-0", "fake", None)
    assert (phone.driver, phone.capabilities) == ("uiautomator2", {"appium:udid": "emulator-5554"})
    assert phone.apps["transit"] == "com.example.transit"


def test_the_environment_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "flywheel.toml"
    path.write_text("[round]\ntasks = 10\nseed = 4\n")
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(path))
    monkeypatch.setenv("FLYWHEEL_ROUND__TASKS", "33")
    settings = load_settings()
    assert (settings.round.tasks, settings.round.seed) == (33, 4)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[curation]\nreject_quality = 0.8\n", "reject_quality"),
        ("[round]\nshard_size = 0\n", "round.shard_size"),
        ("[episode]\nfault_rates = 0.1\n", "fault_rates"),
        ("[balance]\nsource = { template = 0.5 }\n", "target_mix.source"),
        ("[planning]\nmin_atempts = 2\n", "planning.min_atempts: is not a rule of the plan"),
        ("[planning]\np_low = 0.95\n", "p_low: 0.95 must be below p_high"),
        ("[planning]\nreplay_attempts = 2.5\n", "replay_attempts: 2.5 must be an integer"),
    ],
)
def test_bad_settings_name_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, needle: str
) -> None:
    path = tmp_path / "flywheel.toml"
    path.write_text(text)
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(path))
    with pytest.raises(FlywheelError, match=re.escape(needle)):
        load_settings()


def test_a_named_settings_file_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(FlywheelError, match="FLYWHEEL_CONFIG"):
        load_settings()


def test_label_studio_secrets_are_checked_but_never_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "not-hex-but-secret"
    monkeypatch.delenv("FLYWHEEL_LABEL_STUDIO__URL", raising=False)  # make test sets it
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO__TOKEN", secret)
    with pytest.raises(FlywheelError, match="40 hex characters") as bad:
        load_settings()
    assert secret not in str(bad.value)

    # A configured server may take any token (a personal access token, say).
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO__URL", "http://127.0.0.1:8089")
    settings = load_settings()
    assert settings.label_studio.token is not None
    assert settings.label_studio.token.get_secret_value() == secret
    assert secret not in repr(settings)

    monkeypatch.delenv("FLYWHEEL_LABEL_STUDIO__TOKEN")
    with pytest.raises(FlywheelError, match="url is set but neither token nor token_block is"):
        load_settings()


def test_build_gate_knows_both_gates_and_refuses_others() -> None:
    from flows.gates import build_gate
    from flows.settings import FlywheelSettings
    from human_gate import GATES, AutoGate

    assert isinstance(build_gate("auto", FlywheelSettings()), AutoGate)
    with pytest.raises(FlywheelError, match="auto, label-studio"):
        build_gate("mturk", FlywheelSettings())
    assert GATES == ("auto", "label-studio")


def test_planning_rules_from_the_settings_steer_the_next_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = tasks_of("reply_to_an_email", 2)
    with Catalog.open(tmp_path / "home" / "catalog.duckdb") as catalog:
        catalog.tasks.add("round-x", tasks)
        catalog.feedback.add(report(tasks=[stats(tasks[0], 4), stats(tasks[1], 2)]))  # .8, .4
    path = tmp_path / "flywheel.toml"
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(path))
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))

    path.write_text("")
    default = next_plan(load_settings(), 40)
    path.write_text("[planning]\np_high = 0.9\nreplay_attempts = 2\n")
    raised = next_plan(load_settings(), 40)

    assert [p.fingerprint for p in default.preserve] == [tasks[0].fingerprint]
    assert {r.fingerprint: r.attempts for r in default.replays} == {tasks[1].fingerprint: 4}
    assert raised.preserve == ()
    assert {r.fingerprint: r.attempts for r in raised.replays} == {
        tasks[0].fingerprint: 2,
        tasks[1].fingerprint: 2,
    }


def test_the_default_response_limit_is_the_boundary_s() -> None:
    from agents.completions import DEFAULT_MAX_RESPONSE_BYTES
    from flows.settings import ModelEndpoint

    assert ModelEndpoint().max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES


def test_the_default_prefect_start_timeout_is_the_server_s() -> None:
    from flows.servers.prefect import PREFECT_START_TIMEOUT_S
    from flows.settings import PrefectSettings

    assert PrefectSettings().start_timeout_s == PREFECT_START_TIMEOUT_S

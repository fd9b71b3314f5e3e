"""Settings of serving, deployment and the schedule: their defaults, the file, and bad values
refused naming their field and the variable that set it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract import FlywheelError
from flows.settings import (
    DeploymentSettings,
    ScheduleSettings,
    ServingSettings,
    load_settings,
)


def test_the_defaults(config: Path) -> None:
    settings = load_settings()
    assert settings.serving == ServingSettings(
        port=8000, engine="auto", max_new_tokens=256, threads=0, start_timeout_s=180.0
    )
    assert settings.deployment == DeploymentSettings(
        min_overall_gain=0.01,
        max_capability_drop=0.02,
        approval="auto",
        timeout_s=86_400,
        serve=True,
    )
    assert settings.schedule == ScheduleSettings(cron="0 3 * * 1", timezone="UTC", active=True)


def test_the_sections_load_from_the_file(config: Path) -> None:
    config.write_text(
        "[serving]\n"
        'port = 8123\nengine = "vllm"\nmax_new_tokens = 64\nthreads = 2\nstart_timeout_s = 30\n'
        "[deployment]\n"
        'min_overall_gain = 0.05\nmax_capability_drop = 0.0\napproval = "person"\n'
        "timeout_s = 600\nserve = false\n"
        "[schedule]\n"
        'cron = "30 4 * * *"\ntimezone = "Europe/Paris"\nactive = false\n'
    )
    settings = load_settings()
    assert settings.serving == ServingSettings(
        port=8123, engine="vllm", max_new_tokens=64, threads=2, start_timeout_s=30.0
    )
    assert settings.deployment == DeploymentSettings(
        min_overall_gain=0.05,
        max_capability_drop=0.0,
        approval="person",
        timeout_s=600,
        serve=False,
    )
    assert settings.schedule == ScheduleSettings(
        cron="30 4 * * *", timezone="Europe/Paris", active=False
    )


def test_the_environment_wins_over_the_sections_of_the_file(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config.write_text('[serving]\nport = 8123\n[schedule]\ncron = "30 4 * * *"\n')
    monkeypatch.setenv("FLYWHEEL_SERVING__PORT", "9123")
    monkeypatch.setenv("FLYWHEEL_SCHEDULE__CRON", "0 0 1 * *")
    monkeypatch.setenv("FLYWHEEL_DEPLOYMENT__SERVE", "false")
    settings = load_settings()
    assert settings.serving.port == 9123
    assert settings.schedule.cron == "0 0 1 * *"
    assert settings.deployment.serve is False


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("FLYWHEEL_SCHEDULE__CRON", "x y", "schedule.cron: 'x y' is not a cron expression"),
        ("FLYWHEEL_SCHEDULE__CRON", "61 * * * *", "schedule.cron: '61 * * * *' is not a cron"),
        (
            "FLYWHEEL_SCHEDULE__TIMEZONE",
            "Mars/Olympus",
            "schedule.timezone: 'Mars/Olympus' is not an IANA time zone",
        ),
        ("FLYWHEEL_DEPLOYMENT__MIN_OVERALL_GAIN", "2", "deployment.min_overall_gain: "),
        ("FLYWHEEL_DEPLOYMENT__MAX_CAPABILITY_DROP", "-0.1", "deployment.max_capability_drop: "),
        ("FLYWHEEL_DEPLOYMENT__APPROVAL", "maybe", "deployment.approval: "),
        ("FLYWHEEL_SERVING__ENGINE", "tpu", "serving.engine: "),
        ("FLYWHEEL_SERVING__PORT", "80", "serving.port: "),
        ("FLYWHEEL_SERVING__MAX_NEW_TOKENS", "0", "serving.max_new_tokens: "),
    ],
)
def test_a_bad_value_names_its_field_and_its_variable(
    config: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(FlywheelError) as refused:
        load_settings()
    message = str(refused.value)
    assert message.startswith("settings: ")
    assert needle in message
    section = needle.split(".", maxsplit=1)[0]
    assert f"(set by {variable} or [{section}] in the file)" in message


def test_the_engine_names_the_engines_it_allows(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_SERVING__ENGINE", "tpu")
    with pytest.raises(FlywheelError, match=re.escape("'auto', 'local' or 'vllm'")):
        load_settings()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[schedule]\ncron = "every monday"\n', "schedule.cron"),
        ('[schedule]\ntimezone = "utc"\n', "schedule.timezone"),  # IANA names are exact
        ("[deployment]\nmin_overall_gain = 1.5\n", "deployment.min_overall_gain"),
        ("[deployment]\nmin_gain = 0.1\n", "deployment.min_gain"),  # a misspelt key
        ('[serving]\nengine = "tpu"\n', "serving.engine"),
        ('[storage]\nshards = "nfs:/exports/flywheel"\n', "storage.shards"),  # no scheme
        ('[storage]\nshards = "file:///data/flywheel"\n', "storage.shards"),  # a local path
        ('[storage]\nshards = "nosuch://bucket"\n', "storage.shards"),
        ('[execution]\nrunner = "dask"\n', "execution.runner"),
        ('[execution]\naddress = "http://head:6379"\n', "execution.address"),
        ('[execution]\nwork_pool = "My Pool"\n', "execution.work_pool"),
    ],
)
def test_a_bad_value_in_the_file_names_its_field(config: Path, text: str, needle: str) -> None:
    config.write_text(text)
    with pytest.raises(FlywheelError, match=re.escape(needle)):
        load_settings()


@pytest.mark.parametrize("cron", ["0 3 * * 1", "*/15 * * * *", "0 3 * * MON", "@daily"])
def test_cron_expressions_prefect_accepts_are_kept(
    config: Path, monkeypatch: pytest.MonkeyPatch, cron: str
) -> None:
    monkeypatch.setenv("FLYWHEEL_SCHEDULE__CRON", cron)
    assert load_settings().schedule.cron == cron

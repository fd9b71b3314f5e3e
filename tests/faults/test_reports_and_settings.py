"""Feedback reports are read strictly and within limits; settings never ignore a variable
or accept a URL that is not http(s)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from contract import FlywheelError
from flows.settings import load_settings
from storage import Catalog

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "feedback-report.json"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("FLYWHEEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def ingest(path: Path) -> Any:
    return CliRunner().invoke(app, ["feedback", "ingest", str(path), "--json"])


def stored(home: Path) -> int:
    if not (home / "catalog.duckdb").exists():
        return 0
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        return len(catalog.feedback.summaries())


@pytest.mark.parametrize("raw", ['"0.1"', "NaN", "Infinity", "1e400", "true", "[0.1]", "null"])
def test_a_coerced_or_infinite_number_is_refused_by_field(
    home: Path, tmp_path: Path, raw: str
) -> None:
    data = json.loads(EXAMPLE.read_text())
    data["cost"]["mean_cost"] = "__VALUE__"
    report = tmp_path / "report.json"
    report.write_text(json.dumps(data).replace('"__VALUE__"', raw))
    result = ingest(report)
    assert result.exit_code == 1
    assert "cost.mean_cost:" in str(result.exception), str(result.exception)
    assert stored(home) == 0


def test_a_report_over_the_limits_is_refused_without_reading_it_all(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = json.loads(EXAMPLE.read_text())
    big = tmp_path / "big.json"
    with big.open("w") as out:  # 50 MB: the default limit is 16 MiB
        out.write(json.dumps(data)[:-1] + ', "notes": "')
        out.write("x" * 50_000_000)
        out.write('"}')
    result = ingest(big)
    assert result.exit_code == 1 and "report: is larger than 16777216 bytes" in str(
        result.exception
    )
    many = tmp_path / "many.json"
    data["tasks"] = [dict(data["tasks"][0], fingerprint=f"fp-{i:020x}") for i in range(50)]
    many.write_text(json.dumps(data))
    monkeypatch.setenv("FLYWHEEL_FEEDBACK__MAX_TASKS", "40")
    result = ingest(many)
    assert result.exit_code == 1 and "tasks: has 50 entries; at most 40" in str(result.exception)
    monkeypatch.setenv("FLYWHEEL_FEEDBACK__MAX_TASKS", "50")
    assert ingest(many).exit_code == 0
    assert stored(home) == 1


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("FLYWHEEL_NOSUCH__KEY", None),
        ("FLYWHEEL_ROUNDS__TASKS", "FLYWHEEL_ROUND"),
        ("FLYWHEEL_POLCY__MODEL", "FLYWHEEL_POLICY"),
        ("FLYWHEEL_LABELSTUDIO__URL", "FLYWHEEL_LABEL_STUDIO"),
        ("flywheel_gates__wait_s", "FLYWHEEL_GATE"),
        ("FLYWHEEL_NOSUCH", None),
    ],
)
def test_a_variable_that_names_no_setting_is_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch, name: str, hint: str | None
) -> None:
    monkeypatch.setenv(name, "3")
    with pytest.raises(FlywheelError, match=f"settings: {name}: ") as caught:
        load_settings()
    assert "is not a settings section" in str(caught.value)
    if hint:
        assert f"did you mean {hint}?" in str(caught.value)


def test_the_project_s_other_variables_are_not_settings(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FLYWHEEL_CLI", "FLYWHEEL_APPIUM_HOME", "FLYWHEEL_TEST_PREFECT_PORT"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("FLYWHEEL_ROUND__TASKS", "7")
    assert load_settings().round.tasks == 7


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "ftp://127.0.0.1/x",
        "data:text/html,hi",
        "http://",
        "127.0.0.1:8000",
        "http://[::1",
        "http://host name/v1",
        "gopher://127.0.0.1:70",
    ],
)
@pytest.mark.parametrize(
    "variable",
    ["FLYWHEEL_POLICY__BASE_URL", "FLYWHEEL_LABEL_STUDIO__URL", "FLYWHEEL_DEVICES__POOL"],
)
def test_a_url_setting_takes_http_and_https_only(
    home: Path, monkeypatch: pytest.MonkeyPatch, variable: str, url: str
) -> None:
    value = url
    if variable == "FLYWHEEL_DEVICES__POOL":
        value = json.dumps([{"name": "phone", "server": url}])
    else:
        monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO__TOKEN", "0" * 40)
    monkeypatch.setenv(variable, value)
    with pytest.raises(FlywheelError, match="is not an http\\(s\\) URL"):
        load_settings()
    monkeypatch.setenv(
        variable,
        json.dumps([{"name": "phone", "server": "https://farm.example:4723/wd"}])
        if variable == "FLYWHEEL_DEVICES__POOL"
        else "https://127.0.0.1:8443/v1",
    )
    load_settings()

"""Nothing reports to Prefect's servers: the CLI and the flows turn the SDK's telemetry
off before Prefect is imported, unless a person set ``DO_NOT_TRACK`` themselves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from prefect._internal.analytics.ci_detection import CI_ENV_VARS

PROBE = (
    "import {module}, sys; "
    "from prefect._internal.analytics import is_telemetry_enabled; "
    "print(is_telemetry_enabled(), 'prefect' in sys.modules)"
)


@pytest.mark.parametrize("module", ["cli.main", "flows.round"])
def test_importing_our_entry_points_leaves_prefect_telemetry_off(module: str) -> None:
    # CI turns Prefect's telemetry off by itself: without its variables, as on a laptop
    quiet = {"DO_NOT_TRACK", *CI_ENV_VARS}
    env = {k: v for k, v in os.environ.items() if k not in quiet}
    probe = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert probe.stdout.split() == ["False", "True"]
    telemetry = subprocess.run(
        [sys.executable, "-c", PROBE.format(module="os")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert telemetry.stdout.split() == ["True", "True"], "without us, Prefect would report"

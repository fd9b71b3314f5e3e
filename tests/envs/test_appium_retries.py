"""The Appium client retries nothing itself: a failed device is tried again once, by the
collector on another device (``[retries] backend``)."""

from __future__ import annotations

import logging

import pytest

from envs.appium.device import DeviceFaultError, connect
from tests.fakes import refusing_url


def test_a_refused_connection_is_reported_at_once(caplog: pytest.LogCaptureFixture) -> None:
    server = refusing_url().removesuffix("/v1")
    with (
        caplog.at_level(logging.WARNING, logger="urllib3"),
        pytest.raises(DeviceFaultError) as caught,
    ):
        connect(server, {"platformName": "Android", "appium:automationName": "Fake"}, 2.0)
    assert server in str(caught.value)
    retried = [r for r in caplog.records if "Retrying" in r.getMessage()]
    assert retried == []

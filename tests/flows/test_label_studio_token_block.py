"""The Label Studio token may live in a Prefect Secret block instead of the environment."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from prefect.blocks.system import Secret
from pydantic import SecretStr, ValidationError

from flows.servers import LabelStudioAccess, ServerError, label_studio_credentials, prefect_api
from flows.settings import LabelStudioSettings


@pytest.mark.slow
def test_the_token_is_read_from_a_secret_block(
    prefect_api_url: str, label_studio: LabelStudioAccess, tmp_path: Path
) -> None:
    name = f"label-studio-token-{uuid.uuid4().hex[:8]}"
    settings = LabelStudioSettings(url=label_studio.url, token_block=name)
    with prefect_api(prefect_api_url):
        Secret(value=SecretStr(label_studio.token)).save(name)
        access = label_studio_credentials(tmp_path, settings)
    assert access == label_studio


@pytest.mark.slow
def test_a_missing_block_is_named_without_a_token(prefect_api_url: str, tmp_path: Path) -> None:
    settings = LabelStudioSettings(url="http://127.0.0.1:9", token_block="no-such-block")
    with prefect_api(prefect_api_url), pytest.raises(ServerError) as raised:
        label_studio_credentials(tmp_path, settings)
    assert "label_studio.token_block" in str(raised.value)
    assert "'no-such-block'" in str(raised.value)


def test_token_and_token_block_together_are_refused() -> None:
    with pytest.raises(ValidationError, match="token and token_block are both set"):
        LabelStudioSettings(url="http://127.0.0.1:9", token=SecretStr("t"), token_block="b")
    with pytest.raises(ValidationError, match="neither token nor token_block"):
        LabelStudioSettings(url="http://127.0.0.1:9")

"""The local Label Studio serves the artifact store, and nothing else, through local files
(no server needed; ``tests/human_gate/test_label_studio_artifacts.py`` fetches from one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from flows.servers import ServerError, label_studio_server
from flows.servers.label_studio import label_studio_artifact_root
from flows.settings import LabelStudioSettings


def test_the_document_root_holds_only_a_link_to_the_artifact_store(tmp_path: Path) -> None:
    server = label_studio_server(tmp_path, 8189)
    env = server.spec.env
    assert env["LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED"] == "true"
    root = Path(env["LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT"])
    assert root == (tmp_path / "label-studio" / "local-files").absolute() == server.files_root
    assert server.artifact_root == root / "artifacts"
    assert label_studio_artifact_root(tmp_path, LabelStudioSettings()) == server.artifact_root

    server.link_artifacts()
    server.link_artifacts()  # again: nothing changes
    assert os.listdir(root) == ["artifacts"]
    assert server.artifact_root.is_symlink()
    assert server.artifact_root.resolve() == (tmp_path / "artifacts").resolve()
    assert (tmp_path / "artifacts").is_dir()

    elsewhere = label_studio_server(tmp_path, 8189, artifacts=tmp_path / "store")
    elsewhere.link_artifacts()
    assert os.listdir(root) == ["artifacts"]
    assert server.artifact_root.resolve() == (tmp_path / "store").resolve()


def test_a_folder_in_place_of_the_link_is_not_replaced(tmp_path: Path) -> None:
    server = label_studio_server(tmp_path, 8189)
    (server.artifact_root / "kept").mkdir(parents=True)
    with pytest.raises(ServerError, match="should be a link to the artifact store"):
        server.link_artifacts()
    assert (server.artifact_root / "kept").is_dir()


def test_a_remote_label_studio_gets_no_artifact_root(tmp_path: Path) -> None:
    remote = LabelStudioSettings(url="http://127.0.0.1:9/", token=SecretStr("t" * 40))
    assert label_studio_artifact_root(tmp_path, remote) is None

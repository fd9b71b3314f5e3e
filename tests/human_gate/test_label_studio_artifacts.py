"""Screenshots and page sources on the review page, served by a real local Label Studio.

The server must be one that ``flywheel server start label-studio`` started (local-files
serving on, the artifact store linked into its document root): the shared server of
``scripts/with-servers.sh`` (its home is ``$FLYWHEEL_HOME``), else a private one.
"""

from __future__ import annotations

import logging
import os
import secrets
import struct
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest
from label_studio_sdk import LabelStudio

from agents.curator import curate
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import RetryPolicy, Routing
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import LabelStudioAccess, free_port, label_studio_server
from human_gate import GateItem
from human_gate.label_studio.gate import LabelStudioGate, LabelStudioGateConfig
from storage.artifacts import ArtifactStore
from tests.human_gate.annotations import tasks_by_trajectory

pytestmark = pytest.mark.slow

# No proxy: the requests go to the local server only.
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Served(NamedTuple):
    access: LabelStudioAccess
    artifact_root: Path  # the artifact store as the server reaches it


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The shared server of ``with-servers.sh``, else a private one (about 30 s)."""
    url = os.environ.get("FLYWHEEL_LABEL_STUDIO__URL")
    home = os.environ.get("FLYWHEEL_HOME")
    token = os.environ.get("FLYWHEEL_LABEL_STUDIO__TOKEN")
    if url:
        port = urlsplit(url).port
        if not (home and token and port):
            pytest.fail(
                "FLYWHEEL_LABEL_STUDIO__URL is set but FLYWHEEL_HOME, the token or the port "
                "is not: run through scripts/with-servers.sh, or unset it for a private server"
            )
        shared = label_studio_server(Path(home), port)
        if not shared.artifact_root.is_symlink():
            pytest.fail(f"the Label Studio at {url} was not started under $FLYWHEEL_HOME={home}")
        yield Served(LabelStudioAccess(url.rstrip("/"), token), shared.artifact_root)
        return
    if os.environ.get("CI") == "true":
        pytest.fail("FLYWHEEL_LABEL_STUDIO__URL is not set: run the suite through make test")
    home_dir = tmp_path_factory.mktemp("label-studio-artifacts")
    private = label_studio_server(home_dir, free_port(), token=secrets.token_hex(20))
    private.start()
    try:
        assert private.artifact_root.resolve() == (home_dir / "artifacts").resolve()
        yield Served(private.access, private.artifact_root)
    finally:
        private.stop()


@pytest.fixture(scope="module")
def item(sandbox: MobileSandbox) -> GateItem:
    """A real episode routed to a person (its first step gets artifacts in each test)."""
    trajectory = run_episode(sample_tasks(1, 5, sandbox)[0], sandbox, ScriptedPolicy())
    record = curate([trajectory], "r", CuratorConfig(audit_rate=1.0))[0]
    assert record.routing is Routing.NEEDS_HUMAN
    return GateItem(trajectory, record)


def png(seed: bytes) -> bytes:
    """A valid 2x2 PNG whose pixels depend on ``seed`` (so its reference is new)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    pixel = seed[:3].ljust(3, b"\0")
    raw = b"".join(b"\0" + pixel * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def with_artifacts(item: GateItem, refs: list[str]) -> GateItem:
    """``item`` with ``refs`` as its first step's artifacts."""
    steps = list(item.trajectory.steps)
    steps[0] = steps[0].model_copy(update={"artifacts": refs})
    return GateItem(item.trajectory.model_copy(update={"steps": steps}), item.curation)


class Links(HTMLParser):
    """The image sources and link targets of an HTML fragment (entities decoded)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.images: list[str] = []
        self.links: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "img":
            self.images.append(found["src"] or "")
        elif tag == "a":
            self.links.append(found["href"] or "")


def fetch(access: LabelStudioAccess, path: str, token: str | None = None) -> tuple[int, bytes]:
    """The status and body of ``GET path`` on the server, with its token unless given."""
    headers = {"Authorization": f"Token {token or access.token}"} if token != "" else {}
    request = urllib.request.Request(access.url + path, headers=headers)
    try:
        with LOCAL.open(request, timeout=30) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def submitted_html(served: Served, item: GateItem, round_id: str) -> tuple[LabelStudioGate, str]:
    url, token = served.access
    config = LabelStudioGateConfig(
        artifact_root=served.artifact_root,
        retry=RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.04),
    )
    gate = LabelStudioGate.connect(url, token, config)
    gate.submit(round_id, [item])
    project = gate.project_id(round_id)
    assert project is not None
    task: Any = tasks_by_trajectory(gate.client, project)[item.trajectory_id]
    return gate, str(task.data["html"])


def test_the_annotator_sees_the_screenshot_and_can_open_the_page_source(
    served: Served, item: GateItem
) -> None:
    store = ArtifactStore(served.artifact_root)
    shot = png(uuid.uuid4().bytes)
    source = f'<hierarchy rotation="0"><node text="{uuid.uuid4()}"/></hierarchy>'.encode()
    shot_ref, source_ref = store.put(shot, ".png"), store.put(source, ".xml")
    missing = "00/00/" + "0" * 64 + ".png"  # referenced, never stored
    round_id = f"artifacts-{uuid.uuid4().hex[:10]}"
    shown = with_artifacts(item, [shot_ref, source_ref, missing])

    gate, html = submitted_html(served, shown, round_id)
    page = Links(html)

    assert page.images == [f"/data/local-files/?d=artifacts/{shot_ref}"]
    assert fetch(served.access, page.images[0]) == (200, shot)
    source_links = [link for link in page.links if link.endswith(".xml")]
    assert source_links == [f"/data/local-files/?d=artifacts/{source_ref}"]
    assert fetch(served.access, source_links[0]) == (200, source)
    assert f"📷 {missing}" in html  # not in the store: named, not linked

    # A second submit adds no storage (nor task); signed-out requests are refused.
    project = gate.project_id(round_id)
    assert project is not None
    client: LabelStudio = gate.client
    storages = client.import_storage.local.list(project=project)
    assert {s.path for s in storages} == {os.path.normpath(served.artifact_root)}
    gate.submit(round_id, [shown])
    assert len(client.import_storage.local.list(project=project)) == len(storages)
    assert len(tasks_by_trajectory(client, project)) == 1
    assert fetch(served.access, page.images[0], token="")[0] == 401


@pytest.mark.parametrize(
    "path",
    [
        "artifacts/../../label_studio.sqlite3",  # the database, next to the document root
        "/etc/passwd",
        "artifacts/../../../servers/label-studio/credentials.json",
    ],
)
def test_nothing_outside_the_artifact_store_is_served(
    served: Served, item: GateItem, path: str
) -> None:
    # A project with the artifact storage exists (the first test or this one makes it).
    store = ArtifactStore(served.artifact_root)
    ref = store.put(png(b"\x01\x02\x03"), ".png")
    submitted_html(served, with_artifacts(item, [ref]), f"outside-{uuid.uuid4().hex[:8]}")
    status, body = fetch(served.access, "/data/local-files/?d=" + path)
    assert status in (403, 404, 500), status  # 500: Label Studio's refusal of a "../" path
    assert b"SQLite" not in body and b"root:" not in body and b"token" not in body


def test_a_server_that_cannot_serve_the_folder_gets_references_as_text(
    served: Served, item: GateItem, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "artifacts"  # not under the server's document root
    ref = ArtifactStore(outside).put(png(b"\x04\x05\x06"), ".png")
    url, token = served.access
    gate = LabelStudioGate.connect(url, token, LabelStudioGateConfig(artifact_root=outside))
    round_id = f"outside-{uuid.uuid4().hex[:8]}"
    shown = with_artifacts(item, [ref])
    with caplog.at_level(logging.WARNING, logger="human_gate.label_studio.gate"):
        gate.submit(round_id, [shown])
    assert "artifacts show as references" in caplog.text
    project = gate.project_id(round_id)
    assert project is not None
    html = str(tasks_by_trajectory(gate.client, project)[shown.trajectory_id].data["html"])
    assert Links(html).images == [] and f"📷 {ref}" in html

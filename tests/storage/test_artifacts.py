"""The artifact store: content-addressed, atomic, and closed to paths outside it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from contract import InvalidInputError
from storage import ArtifactStore, UnknownIdError


def test_the_same_bytes_get_the_same_reference(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    data = b"<hierarchy><node text='Send'/></hierarchy>"
    ref = store.put(data, ".xml")
    digest = hashlib.sha256(data).hexdigest()

    assert ref == f"{digest[:2]}/{digest[2:4]}/{digest}.xml"
    assert store.put(data, ".xml") == ref
    assert store.get(ref) == data
    assert store.path(ref) == (tmp_path / "artifacts" / ref).resolve()
    assert ref in store
    assert store.put(b"", "") != ref
    files = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    assert len(files) == 2 and not any(p.name.startswith(".") for p in files)


@pytest.mark.parametrize(
    "ref",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "ab/cd/../../../x.png",
        f"ab/../{'0' * 64}.png",
        "ab/cd/short.png",
    ],
)
def test_references_that_leave_the_store_are_refused(tmp_path: Path, ref: str) -> None:
    store = ArtifactStore(tmp_path)
    with pytest.raises(InvalidInputError, match="not an artifact reference"):
        store.path(ref)
    assert ref not in store


def test_a_suffix_must_be_an_extension(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    for suffix in ("png", "./x", ".a/b", ". png"):
        with pytest.raises(InvalidInputError, match="suffix"):
            store.put(b"x", suffix)
    assert store.put(b"x", ".tar.gz").endswith(".tar.gz")


def test_a_missing_artifact_is_an_unknown_id(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ref = f"ab/cd/ab{'0' * 62}.png"
    with pytest.raises(UnknownIdError, match=f"unknown artifact id '{ref}' in {tmp_path}"):
        store.get(ref)


def test_a_store_at_a_url_keeps_artifacts_as_objects() -> None:
    """Below an fsspec URL (here fsspec's in-memory filesystem) the store behaves alike:
    same references, one object per content, refusals by the same rules."""
    import fsspec

    root = f"memory://artifacts-{hashlib.sha256(b'url').hexdigest()[:8]}"
    store = ArtifactStore(root)
    data = b"\x89PNG fake"
    ref = store.put(data, ".png")
    assert store.put(data, ".png") == ref
    assert store.path(ref) == f"{root}/{ref}"
    assert ref in store and store.get(ref) == data
    fs, key = fsspec.core.url_to_fs(root)
    assert fs.find(key) == [f"/{key.lstrip('/')}/{ref}"]
    with pytest.raises(UnknownIdError):
        store.get(ref.replace(".png", ".xml"))
    with pytest.raises(InvalidInputError, match="not an artifact reference"):
        store.path("../../etc/passwd")

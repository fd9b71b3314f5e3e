"""Locations: local paths stay inside their root, URLs take plain names only."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract import InvalidInputError
from storage.locations import check_url, is_url, join, name_of, parent_of


def test_a_url_below_a_root_takes_plain_names_only() -> None:
    assert join("s3://bucket/rounds", "r-1", "shards", "shard-00000.parquet") == (
        "s3://bucket/rounds/r-1/shards/shard-00000.parquet"
    )
    for bad in ("..", ".", "a/b", "", "-x", "a b"):
        with pytest.raises(InvalidInputError, match="plain name"):
            join("s3://bucket/rounds", bad)


def test_a_local_root_is_never_left(tmp_path: Path) -> None:
    assert join(tmp_path, "r", "x.parquet") == tmp_path.resolve() / "r" / "x.parquet"
    with pytest.raises(InvalidInputError, match="outside"):
        join(tmp_path, "..", "x")


def test_names_and_parents_of_both_kinds() -> None:
    url = "s3://bucket/rounds/r/shards/s.parquet"
    assert (name_of(url), parent_of(url)) == ("s.parquet", "s3://bucket/rounds/r/shards")
    assert (name_of(Path("/a/b.parquet")), parent_of(Path("/a/b.parquet"))) == (
        "b.parquet",
        Path("/a"),
    )
    assert is_url("s3://b/x") and not is_url(Path("s3:/b")) and not is_url("/data/x")


def test_only_urls_of_known_filesystems_are_accepted() -> None:
    assert check_url("s3://bucket/prefix/") == "s3://bucket/prefix"
    for bad in ("file:///data", "nosuch://x", "bucket/prefix", "s3://"):
        with pytest.raises(InvalidInputError) as caught:
            check_url(bad)
        assert caught.value.allowed is not None and "s3" in caught.value.allowed

"""A content-addressed artifact store: screenshots, page sources, exports.

Its root is a local folder or an fsspec URL (``storage.locations``: object storage); an
artifact is one file, or one object uploaded whole, named by its content.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath

from contract import InvalidInputError
from storage.errors import UnknownIdError
from storage.files import write_atomically
from storage.locations import Location, filesystem, is_url

_SUFFIX = re.compile(r"^(\.[A-Za-z0-9_-]{1,16}){0,3}$")
_REF = re.compile(r"^[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{64}(\.[A-Za-z0-9_-]{1,16}){0,3}$")


class ArtifactStore:
    """Files named by the sha256 of their bytes, under two levels of prefix folders.

    A reference is the relative path ``ab/cd/abcd...ef.png``: storing the same bytes
    twice gives the same reference and writes once.
    """

    def __init__(self, root: Location) -> None:
        self.root: Location = root if is_url(root) else Path(root)

    def put(self, data: bytes, suffix: str = "") -> str:
        """Store ``data``; its reference. ``suffix`` is an extension such as ``.png``."""
        if not _SUFFIX.match(suffix):
            raise InvalidInputError("suffix", f"{suffix!r} is not a file extension like '.png'")
        digest = hashlib.sha256(data).hexdigest()
        ref = f"{digest[:2]}/{digest[2:4]}/{digest}{suffix}"
        target = self.path(ref)
        if isinstance(target, Path):
            if not target.exists():
                write_atomically(target, lambda sink: sink.write(data))
        else:
            fs, key = filesystem(target)
            if not fs.exists(key):
                fs.pipe_file(key, data)
        return ref

    def path(self, ref: str) -> Location:
        """Where the artifact ``ref`` lives (a path, or a URL below a URL root); refuses
        references that leave the store."""
        parts = PurePosixPath(ref).parts
        if not _REF.match(ref) or ".." in parts:
            raise InvalidInputError(
                "artifact", f"{ref!r} is not an artifact reference (like 'ab/cd/abcd...png')"
            )
        if not isinstance(self.root, Path):
            return f"{self.root.rstrip('/')}/{ref}"
        path = (self.root / ref).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise InvalidInputError("artifact", f"{ref!r} points outside {self.root}")
        return path

    def get(self, ref: str) -> bytes:
        """The bytes of artifact ``ref``; UnknownIdError if it is not stored."""
        where = self.path(ref)
        try:
            if isinstance(where, Path):
                return where.read_bytes()
            fs, key = filesystem(where)
            data: bytes = fs.cat_file(key)
            return data
        except FileNotFoundError:
            raise UnknownIdError("artifact", ref, where=str(self.root)) from None

    def __contains__(self, ref: object) -> bool:
        if not isinstance(ref, str) or _REF.match(ref) is None:
            return False
        where = self.path(ref)
        if isinstance(where, Path):
            return where.is_file()
        fs, key = filesystem(where)
        return bool(fs.isfile(key))

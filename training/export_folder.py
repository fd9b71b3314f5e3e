"""Where an export is written, and what it may replace.

An export goes into a folder that is missing, empty, or an earlier export; nothing else
is ever removed. The path is resolved first (``..`` and symbolic links), so
``missing/../notes`` is the folder ``notes``, and a link is followed to the folder it
names. An earlier export is recognised by its manifest (``MANIFEST``: every file it
wrote, with its size) and its dataset card: a folder holding anything else (a file a
person added, a link, a file of another size) is not an earlier export any more.

The export is built in a staging folder beside the target and renamed into place; the
earlier export is renamed aside first and removed only once the new one is in place.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contract import InvalidInputError
from training.card import CARD_MARK

MANIFEST = ".flywheel-export.json"
"""Lists every file an export wrote (relative path and size): what makes it an export."""
CARD = "README.md"
_LISTED = 5


def export_target(out_dir: Path, overwrite: bool) -> Path:
    """The resolved folder an export to ``out_dir`` writes, checked: missing, empty, or
    (with ``overwrite``) an earlier export and nothing more. ``InvalidInputError``
    naming ``out`` otherwise; nothing is created or changed here."""
    given = Path(out_dir).expanduser()
    target = given.resolve()
    shown = f"{out_dir}" if given == target else f"{out_dir} (that is {target})"
    if given.is_symlink() and not given.exists():
        raise InvalidInputError("out", f"{shown} is a broken symbolic link")
    if not target.exists():
        return target
    if not target.is_dir():
        raise InvalidInputError("out", f"{shown} is a file, not a folder")
    if not any(target.iterdir()):
        return target
    if not overwrite:
        raise InvalidInputError(
            "out", f"{shown} exists and is not empty: choose a new folder, or overwrite"
        )
    problem = _not_an_export(target)
    if problem:
        raise InvalidInputError(
            "out", f"{shown} is not an earlier export ({problem}): not replaced"
        )
    return target


def write_manifest(folder: Path, dataset_id: str) -> tuple[str, ...]:
    """List every file in ``folder`` in its manifest; the files, relative and sorted."""
    files = _tree(folder)
    manifest = {"dataset_id": dataset_id, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return tuple(sorted(files))


@contextmanager
def staging(target: Path) -> Iterator[Path]:
    """A new folder beside ``target``; renamed to ``target`` when the block succeeds
    (an earlier export or an empty folder there is replaced), removed when it fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    folder = target.with_name(f".{target.name}.partial-{token}")
    folder.mkdir()
    try:
        yield folder
        if target.exists():
            old = target.with_name(f".{target.name}.old-{token}")
            os.replace(target, old)
            try:
                os.replace(folder, target)
            except BaseException:
                os.replace(old, target)
                raise
            shutil.rmtree(old)
        else:
            os.replace(folder, target)
    finally:
        if folder.exists():
            shutil.rmtree(folder)


def _not_an_export(folder: Path) -> str:
    """Why ``folder`` is not exactly an earlier export; empty when it is one."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        listed = manifest["files"]
        card = (folder / CARD).read_text(encoding="utf-8")
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return f"no readable {MANIFEST} and {CARD}"
    if CARD_MARK not in card or not isinstance(listed, dict):
        return f"{CARD} is not a flywheel dataset card"
    try:
        found = _tree(folder, skip={MANIFEST})
    except InvalidInputError as exc:
        return exc.problem
    extra = sorted(set(found) - set(listed))
    if extra:
        return f"it holds files no export wrote: {_names(extra)}"
    changed = sorted(name for name, size in listed.items() if found.get(name) != size)
    if changed:
        return f"files differ from what the export wrote: {_names(changed)}"
    return ""


def _tree(folder: Path, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
    """Every file under ``folder`` (relative path: size), links refused, never followed."""
    files: dict[str, int] = {}
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        for name in [*dirs, *names]:
            if (here / name).is_symlink():
                link = (here / name).relative_to(folder)
                raise InvalidInputError("out", f"it holds a symbolic link: {link}")
        for name in names:
            relative = str((here / name).relative_to(folder))
            if relative not in skip:
                files[relative] = (here / name).stat().st_size
    return files


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")

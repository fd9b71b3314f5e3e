"""The command that starts the CPU model server (``python -m serving``), in one place."""

from __future__ import annotations

import sys
from pathlib import Path

from serving import DEFAULT_MAX_NEW_TOKENS, SERVED_AS


def serve_command(
    model_dir: Path | str,
    model_id: str,
    name: str,
    port: int,
    *,
    served_as: str = SERVED_AS,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    threads: int = 1,
) -> tuple[str, ...]:
    """``python -m serving`` (this interpreter) serving ``model_dir`` on 127.0.0.1:``port``
    as ``model_id``; see ``serving/__main__.py`` for each option."""
    return (
        sys.executable,
        "-m",
        "serving",
        "--model-dir",
        str(model_dir),
        "--model-id",
        model_id,
        "--name",
        name,
        "--port",
        str(port),
        "--served-as",
        served_as,
        "--max-new-tokens",
        str(max_new_tokens),
        "--threads",
        str(threads),
    )

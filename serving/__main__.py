"""``python -m serving``: serve one local model folder on 127.0.0.1 (the CPU server).

Usage (a stable interface: ``flows/servers/model.py`` builds this command)::

    python -m serving --model-dir PATH --model-id ID --name NAME --port N
        [--served-as champion] [--max-new-tokens 256] [--threads 1]

``--model-dir``    a Hugging Face model folder (model, tokenizer, chat template)
``--model-id``     its registry id, the ``model`` of every completion
``--name``         its readable name; the model answers to it, its id and ``--served-as``
``--port``         the port on 127.0.0.1 (there is no host option: nothing else is bound)
``--served-as``    the alias clients ask for (default ``champion``)
``--max-new-tokens`` the default and the ceiling of a reply's tokens (default 256)
``--threads``      torch threads (default 1; 0 keeps torch's own choice)

The model is loaded and probed before the port is bound: a folder that cannot serve
exits with status 1 and one line on stderr (``serving: error: ...``), and the health
URL never answers. Bad arguments exit with status 2, a port already in use with uvicorn's
status (non-zero) and its one-line error. SIGTERM or SIGINT stop it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from contract import FlywheelError, InvalidInputError
from serving import DEFAULT_MAX_NEW_TOKENS, SERVED_AS
from training.settings import check_directory

HOST = "127.0.0.1"


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="python -m serving",
        description="Serve a local model folder behind an OpenAI-compatible API on 127.0.0.1.",
    )
    parse.add_argument("--model-dir", required=True, help="Hugging Face model folder")
    parse.add_argument("--model-id", required=True, help="registry id (completions' model)")
    parse.add_argument("--name", required=True, help="readable name of the model")
    parse.add_argument("--port", required=True, type=_port, help="port on 127.0.0.1")
    parse.add_argument("--served-as", default=SERVED_AS, help="alias clients ask for")
    parse.add_argument(
        "--max-new-tokens",
        type=_at_least(1),
        default=DEFAULT_MAX_NEW_TOKENS,
        help="default and ceiling of a reply's tokens",
    )
    parse.add_argument(
        "--threads", type=_at_least(0), default=1, help="torch threads; 0: torch's own"
    )
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        _check_folder(args.model_dir)  # before torch loads: a bad folder fails in a second
    except InvalidInputError as exc:
        print(f"serving: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    import torch
    import uvicorn
    from transformers.utils import logging as hf_logging

    from serving.app import ServedModel, create_app

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no bars in the log
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        served = ServedModel.open(
            args.model_dir,
            args.model_id,
            args.name,
            served_as=args.served_as,
            max_new_tokens=args.max_new_tokens,
        )
    except FlywheelError as exc:
        print(f"serving: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    model = served.current
    print(
        f"serving: loaded {model.model_id} ({model.name}) from {model.path}; serving it as "
        f"{served.served_as} on http://{HOST}:{args.port}",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        create_app(served), host=HOST, port=args.port, access_log=False, log_level="warning"
    )
    return 0


def _check_folder(path: str) -> None:
    """Refuse (naming ``path``) a folder with no model configuration or tokenizer."""
    try:
        check_directory(Path(path).expanduser().resolve())
    except InvalidInputError as exc:
        raise InvalidInputError("path", exc.problem) from None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _port(text: str) -> int:
    port = _at_least(1)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (1 to 65535)")
    return port


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    return parse


if __name__ == "__main__":
    sys.exit(main())

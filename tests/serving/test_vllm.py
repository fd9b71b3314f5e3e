"""The ``vllm serve`` command (vLLM itself cannot run here: no GPU, no vLLM), and the
client side that flows import without torch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from contract import InvalidInputError
from serving.client import health
from serving.vllm import model_names, vllm_argv, vllm_available


def test_the_command_serves_the_folder_on_localhost_with_hermes_tool_calls() -> None:
    argv = vllm_argv(Path("/models/m1"), 8123, ("model-abc", "champion", "tiny-1"))

    assert argv[:3] == ("vllm", "serve", "/models/m1")
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    at = argv.index("--served-model-name")
    assert argv[at + 1 : at + 4] == ("model-abc", "champion", "tiny-1")
    assert "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert "--max-model-len" not in argv


def test_names_are_kept_in_order_once_and_the_context_is_set_when_asked() -> None:
    argv = vllm_argv("/m", 8000, ("champion", "m-1", "champion", "m-1"), max_model_len=4096)
    at = argv.index("--served-model-name")
    assert argv[at + 1 : at + 3] == ("champion", "m-1")
    assert argv[at + 3].startswith("--")
    assert argv[-2:] == ("--max-model-len", "4096")


def test_model_names_put_the_registry_id_first() -> None:
    assert model_names("model-abc", "tiny-1") == ("model-abc", "champion", "tiny-1")
    assert model_names("model-abc", "model-abc", "live") == ("model-abc", "live")


@pytest.mark.parametrize(
    ("port", "names", "length", "field"),
    [(0, ("a",), None, "port"), (80, (), None, "served_names"), (80, ("a",), 0, "max_model_len")],
)
def test_bad_arguments_are_refused_by_name(
    port: int, names: tuple[str, ...], length: int | None, field: str
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        vllm_argv("/m", port, names, max_model_len=length)
    assert raised.value.field == field


def test_vllm_is_not_available_without_its_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert vllm_available() is False


def test_the_client_side_imports_without_the_model_stack() -> None:
    """Flows import ``serving.client`` and ``serving.vllm``: no torch, no transformers."""
    code = (
        "import sys, serving, serving.client, serving.vllm; "
        "heavy = {'torch', 'transformers', 'fastapi'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_server_side_names_load_on_first_use() -> None:
    import serving
    from serving.app import ServedModel

    assert serving.ServedModel is ServedModel
    with pytest.raises(AttributeError, match="nothing_here"):
        _ = serving.nothing_here


class _VllmLike(BaseHTTPRequestHandler):
    """What vLLM answers: an empty ``/health``, its served names at ``/v1/models``."""

    def do_GET(self) -> None:
        body = b""
        if self.path == "/v1/models":
            names = ("model-abc", "champion")
            body = json.dumps({"object": "list", "data": [{"id": n} for n in names]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def test_health_of_a_vllm_server_names_its_first_served_model() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VllmLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert health(f"http://127.0.0.1:{server.server_address[1]}") == {
            "status": "ok",
            "model_id": "model-abc",
        }
    finally:
        server.shutdown()
        server.server_close()

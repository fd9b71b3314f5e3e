"""The model server: the champion behind an OpenAI-compatible endpoint on 127.0.0.1.

``flywheel server start model`` serves the registry's champion (``serving/`` on the CPU,
``vllm serve`` when the engine is vLLM); the deployment flow starts it for a model it
promotes, or swaps the model of a running CPU server in place (``serving.client``). The
server answers to the alias ``champion``, and to the model's registry id and name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract import ModelAlias, ModelRecord
from flows.servers.managed import ManagedServer, ServerError, ServerSpec, ServerStatus
from serving import SERVED_AS

if TYPE_CHECKING:
    from flows.settings import ServingSettings

MODEL_DEFAULT_PORT = 8000


class ModelServer(ManagedServer):
    """The model server process; which model it serves is decided when it starts."""

    def __init__(
        self,
        home: Path,
        port: int = MODEL_DEFAULT_PORT,
        settings: ServingSettings | None = None,
        model: ModelRecord | None = None,
    ) -> None:
        from flows.settings import ServingSettings

        self.settings = settings or ServingSettings(port=port)
        spec = ServerSpec(
            name="model",
            argv=(),
            port=port,
            health_path="/health",
            env={"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"},
            start_timeout_s=self.settings.start_timeout_s,
        )
        super().__init__(spec, home)
        self.home = home
        self.model = model
        """The model to serve; None: the champion, read from the catalog at start."""

    @property
    def engine(self) -> str:
        """``local`` or ``vllm`` (``auto`` resolved)."""
        if self.settings.engine != "auto":
            return self.settings.engine
        from serving.vllm import vllm_available

        return "vllm" if vllm_available() else "local"

    def start(self) -> ServerStatus:
        """Start serving ``model`` (or the champion) unless the server runs already."""
        if self._live_pid() is None:
            self.spec = replace(self.spec, argv=self.argv(self.model or self.champion()))
        return super().start()

    def argv(self, model: ModelRecord) -> tuple[str, ...]:
        """The command that serves ``model`` with this server's engine."""
        if self.engine == "vllm":
            from serving.vllm import model_names, vllm_argv

            # The registry id first: vLLM answers every completion as its first name.
            names = model_names(model.id, model.name, SERVED_AS)
            return vllm_argv(Path(model.path), self.spec.port, names)
        from serving.command import serve_command

        return serve_command(
            model.path,
            model.id,
            model.name,
            self.spec.port,
            served_as=SERVED_AS,
            max_new_tokens=self.settings.max_new_tokens,
            threads=self.settings.threads,
        )

    def champion(self) -> ModelRecord:
        """The registry's champion; ``ServerError`` when there is none yet."""
        from flows.settings import catalog_path
        from storage import Catalog

        path = catalog_path(self.home)
        if not path.exists():
            raise ServerError(f"no catalog at {path}: there is no champion to serve yet")
        with Catalog.open(path, read_only=True) as catalog:
            record = catalog.models.alias(ModelAlias.CHAMPION)
        if record is None:
            raise ServerError(
                "no champion to serve yet: promote a model with `flywheel deploy --model ID`"
            )
        return record

    def served(self) -> dict[str, Any] | None:
        """What the server says it serves (its ``/health``), or None when it does not answer."""
        from serving.client import health

        return health(self.spec.url)

    def access_notes(self) -> tuple[str, ...]:
        served = self.served()
        if served is None:
            return ()
        return (
            f"OpenAI-compatible endpoint: {self.spec.url}/v1, model '{SERVED_AS}' "
            f"= {served.get('model_id')} ({served.get('name')})",
        )


def model_server(
    home: Path, port: int = MODEL_DEFAULT_PORT, settings: ServingSettings | None = None
) -> ModelServer:
    """The model server of ``home`` on ``port``, serving the champion when started."""
    if settings is not None and settings.port != port:
        settings = settings.model_copy(update={"port": port})
    return ModelServer(home, port, settings)

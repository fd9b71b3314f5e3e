"""Local servers the flywheel needs (Prefect, Label Studio), started detached, stopped by PID.

``managed`` runs any one server (its PID file, log and health check); ``prefect`` and
``label_studio`` define the two the flywheel needs, with the APIs and credentials code
uses to reach them; ``model`` serves the registry's champion; ``appium`` is the device
pool's Appium server; ``registry`` names them for ``flywheel server start|stop|status``.
Everything public is importable from here.
"""

from flows.servers.appium import (
    APPIUM_DEFAULT_PORT,
    APPIUM_HOME_ENV,
    AppiumServer,
    appium_home,
    appium_server,
)
from flows.servers.label_studio import (
    LABEL_STUDIO_DEFAULT_PORT,
    LABEL_STUDIO_DEFAULT_USERNAME,
    LABEL_STUDIO_VENV_ENV,
    REPO_ROOT,
    LabelStudioAccess,
    LabelStudioAccount,
    LabelStudioServer,
    label_studio_account,
    label_studio_credentials,
    label_studio_server,
    label_studio_venv,
    with_token_from_block,
)
from flows.servers.managed import (
    HOST,
    ManagedServer,
    ServerError,
    ServerSpec,
    ServerStatus,
    free_port,
    http_ok,
    port_in_use,
)
from flows.servers.model import MODEL_DEFAULT_PORT, ModelServer, model_server
from flows.servers.prefect import (
    PREFECT_DEFAULT_PORT,
    local_prefect_api,
    prefect_api,
    prefect_server,
    resolve_prefect_api,
)
from flows.servers.registry import SERVERS, ServerKind, known_server

__all__ = [
    "APPIUM_DEFAULT_PORT",
    "APPIUM_HOME_ENV",
    "HOST",
    "LABEL_STUDIO_DEFAULT_PORT",
    "LABEL_STUDIO_DEFAULT_USERNAME",
    "LABEL_STUDIO_VENV_ENV",
    "MODEL_DEFAULT_PORT",
    "PREFECT_DEFAULT_PORT",
    "REPO_ROOT",
    "SERVERS",
    "AppiumServer",
    "LabelStudioAccess",
    "LabelStudioAccount",
    "LabelStudioServer",
    "ManagedServer",
    "ModelServer",
    "ServerError",
    "ServerKind",
    "ServerSpec",
    "ServerStatus",
    "appium_home",
    "appium_server",
    "free_port",
    "http_ok",
    "known_server",
    "label_studio_account",
    "label_studio_credentials",
    "label_studio_server",
    "label_studio_venv",
    "local_prefect_api",
    "model_server",
    "port_in_use",
    "prefect_api",
    "prefect_server",
    "resolve_prefect_api",
    "with_token_from_block",
]

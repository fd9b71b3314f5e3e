"""Settings: a TOML file plus ``FLYWHEEL_`` environment variables (nested with ``__``).

The file is ``$FLYWHEEL_CONFIG`` when set, else ``flywheel.toml`` in the working
directory when it exists. Environment variables win over the file. Only entry points
(``flows/``, the CLI) read settings; everything below receives plain arguments.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from contract import (
    BLOCK_NAME,
    DEFAULT_SIMULATED_SHARE,
    PROJECT_PREFIX,
    WORK_POOL,
    Capability,
    Difficulty,
    FlywheelError,
    InvalidInputError,
    MixTarget,
    RetryPolicy,
)
from contract.report import DEFAULT_MAX_REPORT_BYTES, DEFAULT_MAX_REPORT_TASKS
from contract.retry import BACKEND_RETRY, LABEL_STUDIO_RETRY, LLM_RETRY, PREFECT_API_ATTEMPTS
from curation.partitions import DEFAULT_PARTITION_SIZE
from curation.planning import PlanningConfig
from storage.locations import Location, check_url

if TYPE_CHECKING:
    from agents.llm import JsonLLM
    from envs.simulated import Simulator

CONFIG_ENV = "FLYWHEEL_CONFIG"
HOME_ENV = "FLYWHEEL_HOME"
"""The state folder's variable (the ``home`` setting)."""
DEFAULT_CONFIG = Path("flywheel.toml")
PolicyName = Literal["scripted", "openai", "champion"]
GateName = Literal["auto", "label-studio"]
ApprovalMode = Literal["auto", "person"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("auto", "person")
_LOCAL_TOKEN = re.compile(r"[0-9a-fA-F]{40}")
ENV_PREFIX = "FLYWHEEL_"
OTHER_VARIABLES = frozenset(
    {
        CONFIG_ENV,
        "FLYWHEEL_LABEL_STUDIO_VENV",
        "FLYWHEEL_APPIUM_HOME",
        "FLYWHEEL_CLI",
        "FLYWHEEL_TEST_PREFECT_PORT",
        "FLYWHEEL_TEST_LABEL_STUDIO_PORT",
        "FLYWHEEL_TEST_APPIUM_PORT",
    }
)
"""Variables of the project that are not settings: the settings file, the servers'
environments, and the test servers' ports (``scripts/with-servers.sh``)."""


def _http_url(value: str) -> str:
    """An http(s) URL with a host: no ``file:``, ``javascript:`` or other scheme."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:  # a malformed port or IPv6 address
        host = None
    if host is None or parts.scheme not in ("http", "https") or any(c.isspace() for c in value):
        raise ValueError(
            f"{value!r} is not an http(s) URL with a host, like 'http://127.0.0.1:8000/v1'"
        )
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
"""A URL the flywheel sends requests to: http or https only."""


class Section(BaseModel):
    """A settings section: a misspelt key in the file is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid")


class ModelEndpoint(Section):
    """An OpenAI-compatible chat-completions endpoint."""

    base_url: HttpUrl = Field(
        default="http://127.0.0.1:8000/v1", description="endpoint URL (http or https)"
    )
    model: str = Field(default="planner", description="model name the endpoint serves")
    api_key: SecretStr | None = Field(
        default=None, description="from FLYWHEEL_POLICY__API_KEY; never logged or stored"
    )
    timeout_s: float = Field(default=60.0, gt=0, description="per-request timeout")
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_response_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description="largest completion body read; a larger one is an endpoint failure",
    )


class EpisodeSettings(Section):
    max_steps: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="one step budget for every episode; default: the budget each task records",
    )
    fault_rate: float = Field(
        default=0.3, ge=0, le=1, description="share of scripted episodes with an injected fault"
    )
    recovery_rate: float = Field(
        default=0.5, ge=0, le=1, description="chance the scripted policy recovers from its fault"
    )


class RoundSettings(Section):
    """What one flywheel round does and how it spreads the work."""

    tasks: int = Field(default=120, ge=1, le=100_000, description="tasks to construct")
    seed: int = Field(default=0, ge=0, description="seed of task construction")
    policy: PolicyName = Field(default="scripted", description="policy that collects")
    teacher_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="with an LLM policy (openai, champion): share of the round's tasks the "
        "scripted teacher collects instead, so a weak model still leaves data to learn from",
    )
    correct_failures: bool = Field(
        default=False,
        description="with an LLM policy (openai, champion): the scripted teacher collects "
        "again each task the model failed, so the version gains a correct demonstration "
        "where the model errs",
    )
    bfcl_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="share of the round's tasks taken from BFCL's multi-turn tasks "
        "(1: a BFCL round); the sandbox's plan covers the rest",
    )
    simulated_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="share of the round's tasks on long-tail tools a chat model simulates "
        "([agent_llm] with the tool_simulator role)",
    )
    gate: GateName = Field(default="auto", description="human gate implementation")
    plan: Literal["feedback", "default"] = Field(
        default="feedback",
        description="feedback: plan from the latest feedback report (the even mix while "
        "there is none); default: always the even mix",
    )
    shard_size: int = Field(default=200, ge=1, description="tasks per collection shard")
    collect_workers: int = Field(
        default=2,
        ge=1,
        le=64,
        description="collection shards that run at once on threads when their episodes "
        "wait on a model, a device or a simulator (the scripted policy on the sandbox or "
        "BFCL runs one shard at a time: pure Python, one interpreter lock)",
    )
    backend_fault_rate: float = Field(
        default=0.02, ge=0, le=1, description="share of tool calls the sandbox fails"
    )
    max_construct_passes: int = Field(
        default=12, ge=1, description="proposal passes the task-constructor makes per round"
    )


class LLMRetry(RetryPolicy):
    attempts: int = Field(default=LLM_RETRY.attempts, ge=1, le=20, description="tries in all")
    backoff_s: float = Field(default=LLM_RETRY.backoff_s, ge=0, le=600)
    max_backoff_s: float = Field(default=LLM_RETRY.max_backoff_s, ge=0, le=3600)


class LabelStudioRetry(RetryPolicy):
    attempts: int = Field(
        default=LABEL_STUDIO_RETRY.attempts, ge=1, le=20, description="tries in all"
    )
    backoff_s: float = Field(default=LABEL_STUDIO_RETRY.backoff_s, ge=0, le=600)
    max_backoff_s: float = Field(default=LABEL_STUDIO_RETRY.max_backoff_s, ge=0, le=3600)


class BackendRetry(RetryPolicy):
    attempts: int = Field(
        default=BACKEND_RETRY.attempts, ge=1, le=10, description="attempts of a task in all"
    )
    backoff_s: float = Field(default=BACKEND_RETRY.backoff_s, ge=0, le=600)
    max_backoff_s: float = Field(default=BACKEND_RETRY.max_backoff_s, ge=0, le=3600)


class RetrySettings(Section):
    """One retry policy per external dependency, each applied in exactly one place: a
    failure its layer gave up on is final for the layers above (they never try it again)."""

    llm: LLMRetry = Field(
        default_factory=LLMRetry,
        description="every chat-completions endpoint (the policy, the GUI agent, the agents' "
        "LLM): transient failures (connection, timeout, 429, 5xx) are tried again",
    )
    label_studio: LabelStudioRetry = Field(
        default_factory=LabelStudioRetry,
        description="every Label Studio API call: connection errors, timeouts, 429 and 5xx",
    )
    backend: BackendRetry = Field(
        default_factory=BackendRetry,
        description="an episode whose backend failed (a device, the sandbox's simulated "
        "faults) runs again on another one",
    )
    prefect_api: int = Field(
        default=PREFECT_API_ATTEMPTS,
        ge=1,
        le=20,
        description="tries of a Prefect API request (Prefect's client waits 2, 4, 8 ... s "
        "between them; a server gone for [prefect] dead_after_s stops the run)",
    )


MOVED = {
    "policy.max_attempts": "retries.llm.attempts",
    "agent_llm.endpoint.max_attempts": "retries.llm.attempts",
    "devices.gui_model.max_attempts": "retries.llm.attempts",
    "round.max_backend_attempts": "retries.backend.attempts",
}
"""Settings that moved: a file that still sets one is told where it went."""


class CurationSettings(Section):
    approve_quality: float = Field(
        default=0.7, ge=0, le=1, description="quality at or above which a success is approved"
    )
    reject_quality: float = Field(
        default=0.3, ge=0, le=1, description="quality below which an item is rejected"
    )
    near_duplicate_threshold: float = Field(
        default=0.9, gt=0, le=1, description="estimated Jaccard that makes a near-duplicate"
    )
    audit_rate: float = Field(
        default=0.0, ge=0, le=1, description="share of confident items sent to humans anyway"
    )
    simulated_confidence: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="an LLM judge's confidence at or above which a success on simulated "
        "tools is approved without a person",
    )
    partition_size: int = Field(
        default=DEFAULT_PARTITION_SIZE,
        ge=1,
        description="trajectories curated together (a task fingerprint is never split)",
    )
    workers: int = Field(
        default=0,
        ge=0,
        description="processes curating partitions; 0: one per core (<= 8) and per 20,000 "
        "trajectories of the round",
    )

    @model_validator(mode="after")
    def _ordered(self) -> CurationSettings:
        if self.reject_quality >= self.approve_quality:
            raise ValueError(
                f"reject_quality ({self.reject_quality}) must be below "
                f"approve_quality ({self.approve_quality})"
            )
        return self


def _even(values: list[str]) -> dict[str, float]:
    return dict.fromkeys(values, 1 / len(values))


class BalanceSettings(Section):
    """The target mix of a dataset version (shares per value; empty: no target)."""

    capability: dict[str, float] = Field(
        default_factory=lambda: _even([c.value for c in Capability])
    )
    difficulty: dict[str, float] = Field(
        default_factory=lambda: _even([d.value for d in Difficulty])
    )
    domain: dict[str, float] = Field(default_factory=dict)
    source: dict[str, float] = Field(default_factory=dict)
    recovery_share: float | None = Field(
        default=0.2, ge=0, le=1, description="share of verified recovery trajectories"
    )
    simulated_share: float | None = Field(
        default=DEFAULT_SIMULATED_SHARE,
        ge=0,
        le=1,
        description="the most of a version's weight trajectories on simulated tools may "
        "hold (None: no cap)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> BalanceSettings:
        self.target()
        return self

    def target(self) -> MixTarget:
        return MixTarget(
            capability=self.capability,
            difficulty=self.difficulty,
            domain=self.domain,
            source=self.source,
            recovery_share=self.recovery_share,
            simulated_share=self.simulated_share,
        )


AgentRole = Literal["task_constructor", "curator", "balancer", "tool_simulator"]


class AgentLLMSettings(Section):
    """An optional LLM for the agents: goal rewording, the curator's judge, the
    balancer's rationale, and the simulator of long-tail tools (``envs.simulated``).
    Without an endpoint every agent runs its deterministic nodes, and a round takes no
    tasks on simulated tools."""

    endpoint: ModelEndpoint | None = Field(
        default=None, description="OpenAI-compatible endpoint; unset: no LLM"
    )
    roles: tuple[AgentRole, ...] = Field(
        default=("task_constructor", "curator", "balancer", "tool_simulator"),
        description="agents that use the endpoint when it is set",
    )


class GateSettings(Section):
    """How the human gate resolves annotators and how long a round waits for them."""

    consensus: Literal["majority", "unanimous", "any_reject"] = Field(
        default="majority", description="how several annotators' decisions resolve"
    )
    min_annotations: int = Field(
        default=1, ge=1, le=10, description="annotations an item needs to be decided"
    )
    project_prefix: str = Field(
        default="flywheel",
        pattern=f"^{PROJECT_PREFIX.pattern}$",
        description="Label Studio projects: '<prefix> <round>' (letters, digits, spaces, '.', "
        "'_', '-'; at most 64)",
    )
    wait_s: float = Field(
        default=0.0,
        ge=0,
        description="how long a round waits for people; what is still pending is carried over",
    )
    poll_s: float = Field(
        default=5.0, gt=0, description="first wait between syncs while waiting (then doubles)"
    )
    max_poll_s: float = Field(default=60.0, gt=0, description="the longest wait between two syncs")


class ApprovalSettings(Section):
    """Who approves a proposed dataset version before it is frozen for training."""

    mode: ApprovalMode = Field(
        default="auto",
        description="auto: recorded as an automatic approval; person: the round pauses "
        "until someone approves or rejects it in the Prefect UI",
    )
    timeout_s: float = Field(
        default=86_400, ge=1, description="how long a paused round waits for the decision"
    )
    poll_s: float = Field(default=5.0, gt=0, description="how often a paused round looks")


class FeedbackSettings(Section):
    """Limits on a feedback report that ``flywheel feedback ingest`` reads."""

    max_report_bytes: int = Field(
        default=DEFAULT_MAX_REPORT_BYTES, ge=1024, le=2**31, description="largest report read"
    )
    max_tasks: int = Field(
        default=DEFAULT_MAX_REPORT_TASKS, ge=1, le=10_000_000, description="most task entries"
    )


class PrefectSettings(Section):
    port: int = Field(default=4200, ge=1024, le=65535, description="local Prefect server port")
    start_timeout_s: float = Field(
        default=180.0,
        gt=0,
        le=3600,
        description="how long starting the local server may take to answer (63 s seen on "
        "a loaded 2-core machine)",
    )
    dead_after_s: float = Field(
        default=60.0,
        ge=5,
        le=3600,
        description="a flow run from the CLI stops, saying how to resume, once the Prefect "
        "API has not answered for this long",
    )


class LabelStudioSettings(Section):
    """The Label Studio server people review doubtful items in: the local one or ``url``.

    Unset secrets of the local server are generated once and kept, mode 0600, in
    ``<home>/servers/label-studio/credentials.json``.
    """

    port: int = Field(default=8089, ge=1024, le=65535, description="local Label Studio server port")
    start_timeout_s: float = Field(
        default=600.0,
        gt=0,
        le=3600,
        description="how long starting the local server may take to answer (its first start "
        "migrates a new database)",
    )
    username: str = Field(
        default="admin@flywheel.local",
        pattern=r"^[^@\s]+@[^@\s]+$",
        description="email of the local server's admin account",
    )
    token: SecretStr | None = Field(
        default=None,
        description="API token, from FLYWHEEL_LABEL_STUDIO__TOKEN (the local server needs 40 "
        "hex characters); never logged or stored",
    )
    token_block: str | None = Field(
        default=None,
        pattern=f"^{BLOCK_NAME.pattern}$",
        description="name of a Prefect Secret block that holds the API token (instead of token)",
    )
    password: SecretStr | None = Field(
        default=None, description="admin password of the local server; never logged"
    )
    url: HttpUrl | None = Field(
        default=None,
        description="an existing server to use instead of the local one (needs token)",
    )

    @model_validator(mode="after")
    def _usable(self) -> LabelStudioSettings:
        if self.token is not None and self.token_block is not None:
            raise ValueError("token and token_block are both set: keep one")
        if self.url is not None and self.token is None and self.token_block is None:
            raise ValueError("url is set but neither token nor token_block is")
        if (
            self.url is None
            and self.token is not None
            and not _LOCAL_TOKEN.fullmatch(self.token.get_secret_value())
        ):
            raise ValueError("token must be 40 hex characters for the local server (or set url)")
        return self


class ServingSettings(Section):
    """The model server the champion answers behind (``flywheel server start model``)."""

    port: int = Field(default=8000, ge=1024, le=65535, description="model server port")
    engine: Literal["auto", "local", "vllm"] = Field(
        default="auto",
        description="local: the CPU server of serving/; vllm: `vllm serve` (needs a GPU); "
        "auto: vllm when it is installed and a GPU is present, else local",
    )
    max_new_tokens: int = Field(
        default=256, ge=1, le=8192, description="most tokens a reply may have"
    )
    threads: int = Field(
        default=0, ge=0, le=256, description="torch threads of the local server; 0: torch's own"
    )
    start_timeout_s: float = Field(
        default=180.0, gt=0, description="how long starting a server may take to answer"
    )


class DeploymentSettings(Section):
    """The promotion gate and who approves a promotion (``flywheel deploy``)."""

    min_overall_gain: float = Field(
        default=0.01, ge=0, le=1, description="delta: how much the Overall must improve"
    )
    max_capability_drop: float = Field(
        default=0.02, ge=0, le=1, description="epsilon: how much a capability may regress"
    )
    min_interval_low: float = Field(
        default=0.0,
        ge=-1,
        le=1,
        description="the lowest the paired 95% interval of the Overall gain may reach; "
        "0: no plausible resample makes the candidate worse, -1: ignore the interval",
    )
    approval: ApprovalMode = Field(
        default="auto",
        description="auto: the gate decides; person: a promotion the gate allows waits for "
        "someone to approve it in the Prefect UI",
    )
    timeout_s: float = Field(
        default=86_400, ge=1, description="how long a paused deployment waits for a person"
    )
    serve: bool = Field(default=True, description="serve the champion after a promotion")


RunnerName = Literal["threads", "ray"]
RUNNERS: tuple[str, ...] = get_args(RunnerName)


class ExecutionSettings(Section):
    """Where work runs: a round's collection shards on this machine's threads or on a Ray
    cluster; whole flow runs here, or on the Prefect workers of a work pool."""

    runner: RunnerName = Field(
        default="threads",
        description="threads: collection shards on this machine (collect_workers at once "
        "when their episodes wait); "
        "ray: as tasks of a Ray cluster (prefect-ray's RayTaskRunner)",
    )
    address: str | None = Field(
        default=None,
        pattern=r"^(auto|(ray://)?[A-Za-z0-9][A-Za-z0-9.-]*:[0-9]{1,5})$",
        description="with ray: the cluster's address (host:port of `ray start --head`, "
        "ray://host:port, or auto); unset: a Ray instance started for the run",
    )

    work_pool: str = Field(
        default="flywheel",
        pattern=f"^{WORK_POOL.pattern}$",
        description="the process work pool of `flywheel serve --to-pool` and `flywheel "
        "worker` (lowercase letters, digits and '-')",
    )


class StorageSettings(Section):
    """Where the data path's files live besides the state folder."""

    shards: str | None = Field(
        default=None,
        description="where rounds' Parquet shards are written: unset, the state folder's "
        "rounds/; or an fsspec URL such as s3://bucket/prefix, which Ray workers on other "
        "machines reach too (credentials and endpoint from the filesystem's environment: "
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL)",
    )

    artifacts: str | None = Field(
        default=None,
        description="where screenshots and page sources are stored: unset, the state "
        "folder's artifacts/; or an fsspec URL (Label Studio then shows them as references)",
    )

    @field_validator("shards", "artifacts")
    @classmethod
    def _a_known_filesystem(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)


class ScheduleSettings(Section):
    """When ``flywheel serve`` runs scheduled rounds."""

    cron: str = Field(default="0 3 * * 1", description="cron of the scheduled round (in timezone)")
    timezone: str = Field(default="UTC", min_length=1, description="time zone of the cron")
    active: bool = Field(default=True, description="false: registered, but paused")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        from prefect.client.schemas.schedules import CronSchedule

        try:
            CronSchedule(cron=value)
        except ValidationError:
            raise ValueError(f"{value!r} is not a cron expression (e.g. '0 3 * * 1')") from None
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. 'Europe/Paris')") from None
        return value


DriverName = Literal["fake", "uiautomator2"]
DeviceRoute = Literal["none", "gui"]
DEVICE_ROUTES: tuple[DeviceRoute, ...] = ("none", "gui")
GuiAgentName = Literal["scripted", "llm"]
_DEVICE_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"


class AppiumSettings(Section):
    """The local Appium server (``flywheel server start appium``)."""

    port: int = Field(default=4723, ge=1024, le=65535, description="Appium server port")
    start_timeout_s: float = Field(
        default=60.0, gt=0, description="how long starting the server may take to answer"
    )


class DeviceSettings(Section):
    """One entry of the device pool: a phone, an emulator or the fake driver's device
    behind an Appium server. A device farm is several entries (several servers)."""

    name: str = Field(pattern=_DEVICE_NAME, description="pool name; also its Prefect limit")
    server: HttpUrl | None = Field(
        default=None,
        description="Appium server URL; unset: the local server on [appium] port",
    )
    driver: DriverName = Field(
        default="fake", description="fake: Appium's fake driver (tests); uiautomator2: Android"
    )
    capabilities: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="extra W3C capabilities, e.g. appium:udid; they win over the driver's own",
    )
    apps: dict[str, str] = Field(
        default_factory=dict,
        description="uiautomator2: the GUI agent's app names mapped to Android package names",
    )

    @field_validator("server")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value is not None else None


class DevicesSettings(Section):
    """The device pool and which tasks run on it (hybrid rounds)."""

    route: DeviceRoute = Field(
        default="none",
        description="none: every task runs in the sandbox; gui: Sub-agent tasks that call "
        "the GUI agent run on the device pool, the rest in the sandbox",
    )
    pool: list[DeviceSettings] = Field(
        default_factory=lambda: [DeviceSettings(name="fake-0")], min_length=1
    )
    lease_timeout_s: float = Field(
        default=120.0, gt=0, description="how long an attempt waits for a healthy free device"
    )
    command_timeout_s: float = Field(
        default=30.0, gt=0, description="timeout of one Appium command"
    )
    gui_agent: GuiAgentName = Field(
        default="scripted",
        description="scripted: the repo's phone, by element ids; llm: a chat model reads the "
        "screen and acts (real apps), through gui_model",
    )
    gui_model: ModelEndpoint | None = Field(
        default=None, description="the GUI agent's model when gui_agent is llm"
    )

    @model_validator(mode="after")
    def _llm_needs_a_model(self) -> DevicesSettings:
        if self.gui_agent == "llm" and self.gui_model is None:
            raise ValueError("gui_agent is llm but gui_model is not set")
        return self

    @field_validator("pool")
    @classmethod
    def _unique_names(cls, value: list[DeviceSettings]) -> list[DeviceSettings]:
        names = [d.name for d in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"device names must be unique; {', '.join(twice)} is used twice")
        return value


class FlywheelSettings(BaseSettings):
    # Errors never quote their input: a section's input holds its secrets (tokens, keys).
    model_config = SettingsConfigDict(
        env_prefix="FLYWHEEL_", env_nested_delimiter="__", extra="forbid", hide_input_in_errors=True
    )

    home: Path = Field(default=Path(".flywheel"), description="state folder")
    policy: ModelEndpoint = Field(default_factory=ModelEndpoint)
    episode: EpisodeSettings = Field(default_factory=EpisodeSettings)
    round: RoundSettings = Field(default_factory=RoundSettings)
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    retries: RetrySettings = Field(default_factory=RetrySettings)
    curation: CurationSettings = Field(default_factory=CurationSettings)
    balance: BalanceSettings = Field(default_factory=BalanceSettings)
    prefect: PrefectSettings = Field(default_factory=PrefectSettings)
    label_studio: LabelStudioSettings = Field(default_factory=LabelStudioSettings)
    agent_llm: AgentLLMSettings = Field(default_factory=AgentLLMSettings)
    gate: GateSettings = Field(default_factory=GateSettings)
    approval: ApprovalSettings = Field(default_factory=ApprovalSettings)
    feedback: FeedbackSettings = Field(default_factory=FeedbackSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    deployment: DeploymentSettings = Field(default_factory=DeploymentSettings)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    appium: AppiumSettings = Field(default_factory=AppiumSettings)
    devices: DevicesSettings = Field(default_factory=DevicesSettings)
    planning: dict[str, float] = Field(
        default_factory=dict,
        description="overrides of the plan's rules: fields of curation.planning.PlanningConfig",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        refuse_unknown_sections(os.environ, set(settings_cls.model_fields))
        toml = TomlConfigSettingsSource(settings_cls, toml_file=config_path())
        return (init_settings, env_settings, toml)

    @field_validator("planning")
    @classmethod
    def _planning_rules(cls, value: dict[str, float]) -> dict[str, float]:
        planning_config(value)
        return value

    @property
    def catalog_path(self) -> Path:
        return catalog_path(self.home)

    @property
    def artifacts_path(self) -> Path:
        """The local artifact store: screenshots, page sources, exports, by content hash
        (what Label Studio serves to the review page)."""
        return self.home / "artifacts"

    @property
    def artifacts_location(self) -> Location:
        """Where artifacts are stored: ``[storage] artifacts``, else ``artifacts_path``."""
        return self.storage.artifacts or self.artifacts_path


def refuse_unknown_sections(environ: Mapping[str, str], sections: set[str]) -> None:
    """Refuse a ``FLYWHEEL_`` variable that names no setting, as an unknown key in a known
    section is refused: ``FLYWHEEL_ROUNDS__TASKS`` would otherwise be ignored silently."""
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in OTHER_VARIABLES:
            continue
        section = upper.removeprefix(ENV_PREFIX).split("__", 1)[0].lower()
        if section in sections:
            continue
        close = difflib.get_close_matches(section, sorted(sections), n=1)
        hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}?)" if close else ""
        raise InvalidInputError(
            name, f"{section!r} is not a settings section{hint}", sorted(sections)
        )


def planning_config(overrides: Mapping[str, float]) -> PlanningConfig:
    """The plan's rules with the ``[planning]`` overrides; a name ``PlanningConfig`` does
    not have, or a value out of its range, is refused naming it."""
    known = {f.name: f.type for f in fields(PlanningConfig)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise InvalidInputError(
            f"planning.{unknown[0]}", "is not a rule of the plan", tuple(sorted(known))
        )
    values: dict[str, Any] = {
        name: int(value) if known[name] == "int" and float(value).is_integer() else value
        for name, value in overrides.items()
    }
    return PlanningConfig(**values)


def catalog_path(home: Path) -> Path:
    """The DuckDB catalog inside a state folder."""
    return home / "catalog.duckdb"


def agent_llm(settings: FlywheelSettings, role: AgentRole) -> JsonLLM | None:
    """The LLM an agent uses, or None when none is configured for it."""
    endpoint = settings.agent_llm.endpoint
    if endpoint is None or role not in settings.agent_llm.roles:
        return None
    from agents.llm import OpenAIJsonLLM
    from agents.policies.openai_policy import make_client

    key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
    client = make_client(endpoint.base_url, key, endpoint.timeout_s, endpoint.max_response_bytes)
    return OpenAIJsonLLM(
        client,
        endpoint.model,
        endpoint.temperature,
        endpoint.max_response_bytes,
        retry=settings.retries.llm,
    )


def tool_simulator(settings: FlywheelSettings) -> Simulator | None:
    """The chat model that answers long-tail tools (``envs.simulated``), or None when no
    agent LLM has the ``tool_simulator`` role."""
    llm = agent_llm(settings, "tool_simulator")
    if llm is None:
        return None
    from agents.llm import simulator

    return simulator(llm)


def config_path() -> Path | None:
    """The TOML file settings are read from, if any."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise InvalidInputError(CONFIG_ENV, f"no settings file at {path}")
        return path
    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


def load_settings() -> FlywheelSettings:
    """Settings from the file and the environment; contradictions name their field."""
    try:
        return FlywheelSettings()
    except InvalidInputError as exc:  # a variable that names no setting
        raise FlywheelError(f"settings: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "string_pattern_mismatch":  # the value itself is never quoted
            message = f"does not match {(err.get('ctx') or {}).get('pattern')}"
        if not loc:
            raise FlywheelError(f"settings: {message}") from None
        moved = MOVED.get(".".join(loc)) if err["type"] == "extra_forbidden" else None
        if moved is not None:
            message = f"has moved to {moved}"
        env = "FLYWHEEL_" + "__".join(loc).upper()
        raise FlywheelError(
            f"settings: {'.'.join(loc)}: {message} (set by {env} or [{loc[0]}] in the file)"
        ) from None

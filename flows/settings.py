"""Settings, read from the environment (prefix ``FLYWHEEL_``, nested with ``__``).

Only entry points read settings; everything below receives plain arguments.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ModelEndpoint(BaseModel):
    """An OpenAI-compatible chat-completions endpoint."""

    base_url: str = Field(default="http://127.0.0.1:8000/v1", description="endpoint URL")
    model: str = Field(default="planner", description="model name the endpoint serves")
    api_key: SecretStr | None = Field(
        default=None, description="from FLYWHEEL_POLICY__API_KEY; never logged or stored"
    )
    timeout_s: float = Field(default=60.0, gt=0, description="per-request timeout")
    max_attempts: int = Field(default=4, ge=1, description="attempts on transient errors")
    temperature: float = Field(default=0.0, ge=0, le=2)


class EpisodeSettings(BaseModel):
    max_steps: int = Field(default=15, ge=1, le=100, description="step budget of an episode")
    fault_rate: float = Field(
        default=0.3, ge=0, le=1, description="share of scripted episodes with an injected fault"
    )
    recovery_rate: float = Field(
        default=0.5, ge=0, le=1, description="chance the scripted policy recovers from its fault"
    )


class FlywheelSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLYWHEEL_", env_nested_delimiter="__", extra="ignore"
    )

    home: Path = Field(default=Path(".flywheel"), description="state folder")
    policy: ModelEndpoint = Field(default_factory=ModelEndpoint)
    episode: EpisodeSettings = Field(default_factory=EpisodeSettings)


def load_settings() -> FlywheelSettings:
    return FlywheelSettings()

"""Base of every contract record: frozen, strict, JSON-round-trippable, content-addressed."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)


def canonical_json(value: Any) -> bytes:
    """Serialize plain JSON data with sorted keys: the bytes that content ids hash."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def moment(iso: str) -> str:
    """A stored ISO timestamp as people read it: to the second, in UTC."""
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def content_hash(value: Any, length: int = 20) -> str:
    """A short, stable hex digest of plain JSON data."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:length]


class Record(BaseModel):
    """An immutable value of the contract.

    Unknown fields are refused, so a typo in a stored record or a spec fails loudly
    instead of being dropped.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_json(cls, data: bytes | str) -> Any:
        return cls.model_validate_json(data)

    def content_id(self) -> str:
        """Digest of the record's content (its own ``id`` field excluded)."""
        return content_hash(self.model_dump(mode="json", exclude={"id"}))


class LateFields(BaseModel):
    """A record that gained fields after records of it were stored.

    ``late_fields`` are left out of every dump while they hold their default, so a record
    written before they existed dumps, and hashes, as it did: stored content ids stay
    valid, and old readers still read new records that do not use them."""

    late_fields: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_late_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            fields = type(self).model_fields
            for name in self.late_fields:
                default = fields[name].get_default(call_default_factory=True)
                if name in data and getattr(self, name) == default:
                    del data[name]
        return data


TRUSTED_IDS = "trusted_ids"
"""Validation context key: ``{TRUSTED_IDS: True}`` keeps the ids a record arrives with
unchecked (bulk loads of rows whose ids were checked when they were written)."""


class IdentifiedRecord(Record):
    """A record that carries its content-derived id as the field ``id``.

    The id is computed when the record is built. A record loaded with an ``id`` that
    does not match its content is refused: stored data cannot drift silently.
    """

    id_prefix: ClassVar[str] = "rec"
    id: str = ""

    @model_validator(mode="after")
    def _derive_id(self, info: ValidationInfo) -> IdentifiedRecord:
        if self.id and info.context is not None and info.context.get(TRUSTED_IDS):
            return self
        expected = f"{self.id_prefix}-{self.content_id()}"
        if not self.id:
            object.__setattr__(self, "id", expected)
        elif self.id != expected:
            raise ValueError(f"id: {self.id!r} does not match the record's content ({expected!r})")
        return self

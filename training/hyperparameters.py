"""Hyperparameter records that refuse a bad value by its full name and range.

``SftSettings(learning_rate=0)`` raises ``InvalidInputError`` for ``sft.learning_rate``
with ``0 < learning_rate <= 1`` as the allowed values, instead of pydantic's
``ValidationError``: the trainer flow, the CLI and the Prefect form all show the same
message.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError

from contract import InvalidInputError
from contract.validation import InvalidRecordError, invalid_input


class Hyperparameters(BaseModel):
    """A frozen record of hyperparameters; ``root`` prefixes its field names."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    root: ClassVar[str] = "hyperparameters"

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise refusal(type(self), exc) from None

    @classmethod
    def of(cls, values: dict[str, Any]) -> Any:
        """The record of plain ``values`` (refused like the constructor)."""
        return cls(**values)


def refusal(model: type[Hyperparameters], exc: ValidationError) -> InvalidRecordError:
    """``exc``'s problems, each named ``<root>.<field>``, with the field's range; a name
    that is no field gets the nearest field suggested and every field listed."""
    problems = []
    for problem in invalid_input(exc, root=model.root).problems:
        name = problem.field.split(".")[0].split("[")[0]
        field = problem.field if problem.field == model.root else f"{model.root}.{problem.field}"
        if name not in model.model_fields and name != model.root:
            problems.append(unknown_field(model, name, field))
            continue
        bounds = bounds_of(model, name)
        problems.append(InvalidInputError(field, problem.problem, bounds or problem.allowed))
    return InvalidRecordError(problems)


def unknown_field(model: type[BaseModel], name: str, field: str) -> InvalidInputError:
    """``field`` (``name`` in ``model``) is no field: the nearest one suggested, if any."""
    near = difflib.get_close_matches(name, list(model.model_fields), n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return InvalidInputError(field, f"is not a setting{hint}", sorted(model.model_fields))


def bounds_of(model: type[BaseModel], name: str) -> list[str] | None:
    """The range of field ``name`` as one allowed-values entry (``0 < learning_rate <= 1``)."""
    info = model.model_fields.get(name)
    if info is None:
        return None
    low = high = ""
    for bound in info.metadata:
        if isinstance(bound, annotated_types.Gt):
            low = f"{bound.gt} < "
        elif isinstance(bound, annotated_types.Ge):
            low = f"{bound.ge} <= "
        elif isinstance(bound, annotated_types.Lt):
            high = f" < {bound.lt}"
        elif isinstance(bound, annotated_types.Le):
            high = f" <= {bound.le}"
    if not low and not high:
        return None
    text = f"{low}{name}{high}"
    return [f"null or {text}" if info.default is None else text]

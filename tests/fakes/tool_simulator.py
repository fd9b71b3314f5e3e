"""A rule for the scripted chat server that answers as a tool simulator would: it does
what each long-tail tool's description says (``envs.simulated_catalog``: "adds a row to
<collection>" with the call's arguments), the same way every time."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.chat_server import Reply, text_reply

_ADDS = re.compile(r"adds a row to ([a-z_]+\.[a-z_]+)")


def simulate_tool(body: dict[str, Any]) -> Reply:
    """The simulator's answer to the question in ``body`` (``envs.simulated``): the
    state with one row more in the collection the tool's description names."""
    question = json.loads(body["messages"][-1]["content"])
    state: dict[str, dict[str, Any]] = question["state"]
    (collection,) = _ADDS.findall(question["tool"]["description"])
    rows = state.setdefault(collection, {})
    row_id = f"{collection.split('.')[1][:2]}-{len(rows) + 1}"
    rows[row_id] = {"id": row_id, **question["arguments"]}
    return text_reply(json.dumps({"result": {"id": row_id}, "state": state, "error": None}))

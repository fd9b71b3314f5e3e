"""The dataset card of an export (``README.md``): YAML front matter for the Hugging Face
Hub, composition tables, lineage, the training mask, and how to load the data.

Everything in it comes from the catalog and the exported rows, counted while they are
written (``CardTally``): the same version gives the same card, byte for byte.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract import DatasetVersion

CARD_MARK = "\nflywheel:\n  dataset_id: "
"""What marks a folder's README.md as a flywheel export (an export may replace one)."""

_DATA_FILES = {
    "hf": {"sft": "hf/sft/*.arrow", "rl_tasks": "hf/rl_tasks/*.arrow"},
    "parquet": {"sft": "parquet/sft.parquet", "rl_tasks": "parquet/rl_tasks.parquet"},
}
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))


_DIMENSIONS = ("capability", "difficulty", "outcome", "decision", "decided by")


@dataclass
class CardTally:
    """What the card says of an export's rows, counted row by row as they are written:
    no row is kept. Feed it every ``sft`` row in order (``add``) and set ``rl_tasks``."""

    sft_rows: int = 0
    rl_tasks: int = 0
    weight: float = 0.0
    """The total sampling weight, summed in row order."""
    counts: dict[str, Counter[str]] = field(
        default_factory=lambda: {name: Counter() for name in _DIMENSIONS}
    )
    """Per dimension of the composition tables: rows per value."""
    weights: dict[str, dict[str, float]] = field(
        default_factory=lambda: {name: {} for name in _DIMENSIONS}
    )
    """Per dimension: the weight of the rows per value, summed in row order."""
    assistant_turns: int = 0
    trained_turns: int = 0
    masked_rows: int = 0
    """Rows with masked steps."""
    corrected: int = 0
    """Rows with a corrected answer."""

    @property
    def masked_turns(self) -> int:
        return self.assistant_turns - self.trained_turns

    def add(self, row: Mapping[str, Any], assistant: Sequence[bool]) -> None:
        """Count one ``sft`` row (its ``capabilities``, ``difficulty``, ``outcome``,
        ``decision``, ``human``, ``weight``, ``masked_steps`` and ``correction``);
        ``assistant`` has the ``trained`` flag of each of its assistant messages."""
        self.sft_rows += 1
        weight = float(row["weight"])
        self.weight += weight
        for name in _DIMENSIONS:
            counts, weights = self.counts[name], self.weights[name]
            for value in _values(row, name):
                counts[value] += 1
                weights[value] = weights.get(value, 0.0) + weight
        self.assistant_turns += len(assistant)
        self.trained_turns += sum(bool(flag) for flag in assistant)
        self.masked_rows += bool(row["masked_steps"])
        self.corrected += row["correction"] is not None


def dataset_card(
    version: DatasetVersion,
    summary: Mapping[str, Any],
    tally: CardTally,
    *,
    fmt: str,
) -> str:
    """The card of ``version`` exported as ``fmt``, whose rows ``tally`` counted;
    ``summary`` is ``DatasetStore.describe`` of the version."""
    sft, rl = tally.sft_rows, tally.rl_tasks
    parts = [
        _front_matter(version, sft, fmt),
        f"# Mobile planner dataset {version.id}\n",
        f"A frozen dataset version of the mobile planning agents' data flywheel: "
        f"**{sft}** trajectories as tool-calling chats for supervised fine-tuning "
        f"(`sft`), and the **{rl}** tasks they solve as instances for online RL "
        f"(`rl_tasks`). Every member passed the gate (approved, or corrected by a person); "
        f"none comes from a development (held-out) task.\n",
        "## Lineage\n",
        _lineage(version, summary, sft, rl),
        "## Composition\n",
        "Counts of `sft` rows, and their share of the total sampling weight. A task counts "
        "under each of its capabilities.\n",
        _composition(tally),
        _mix(version),
        "## The training mask\n",
        _MASK_TEXT,
        _mask_table(tally),
        "## Columns\n",
        _columns(),
        "## Loading\n",
        _loading(fmt),
        "## Training with TRL, the mask applied\n",
        _trl(fmt),
    ]
    return "\n".join(part for part in parts if part)


def _front_matter(version: DatasetVersion, rows: int, fmt: str) -> str:
    size = next((label for limit, label in _SIZES if rows < limit), "n>1M")
    lines = [
        "---",
        f"pretty_name: {_q('Mobile planner dataset ' + version.id)}",
        "language:",
        "- en",
        "task_categories:",
        "- text-generation",
        "tags:",
        "- tool-calling",
        "- agents",
        "- mobile",
        "- trl",
        "size_categories:",
        f"- {size}",
        "configs:",
    ]
    for name, path in _DATA_FILES[fmt].items():
        lines += [
            f"- config_name: {name}",
            *(["  default: true"] if name == "sft" else []),
            "  data_files:",
            "  - split: train",
            f"    path: {_q(path)}",
        ]
    lines += [
        "flywheel:",
        f"  dataset_id: {_q(version.id)}",
        f"  content_hash: {_q(version.content_hash)}",
        f"  parent: {_q(version.parent) if version.parent else 'null'}",
        f"  round: {_q(version.round_id)}",
        f"  format: {_q(fmt)}",
        "---",
        "",
    ]
    return "\n".join(lines)


def _lineage(
    version: DatasetVersion, summary: Mapping[str, Any], trajectories: int, tasks: int
) -> str:
    approval = summary.get("approval")
    if approval:
        who = "automatically" if approval["automatic"] else f"by {approval['approver']}"
        decided = f"{approval['decision']} {who} at {approval['decided_at']}"
        if approval.get("comment"):
            decided += f': "{approval["comment"]}"'
        if approval.get("flow_run_id"):
            decided += f" (flow run {approval['flow_run_id']})"
    else:
        decided = "none recorded (frozen directly)"
    rows = [
        ("dataset version", f"`{version.id}`"),
        ("parent", f"`{version.parent}`" if version.parent else "none"),
        ("round", f"`{version.round_id}`"),
        ("content hash", f"`{version.content_hash}`"),
        ("generating policies", ", ".join(f"`{p}`" for p in version.policies) or "none"),
        ("approval", decided),
        ("frozen at", str(summary.get("created_at", "unknown"))),
        ("trajectories / tasks", f"{trajectories} / {tasks}"),
        ("reviewed by a person", str(version.human_reviewed)),
    ]
    return _table(("", ""), rows)


def _composition(tally: CardTally) -> str:
    total = tally.weight or 1.0
    tables = []
    for name in _DIMENSIONS:
        counts, weights = tally.counts[name], tally.weights[name]
        rows = [(v, counts[v], f"{weights[v] / total:.3f}") for v in sorted(counts)]
        tables.append(_table((name, "trajectories", "weight share"), rows))
    return "\n".join(tables)


def _values(row: Mapping[str, Any], dimension: str) -> list[str]:
    if dimension == "capability":
        return list(row["capabilities"])
    if dimension == "decided by":
        return ["a person" if row["human"] else "automatic"]
    return [str(row[dimension])]


def _mix(version: DatasetVersion) -> str:
    """Achieved against target, per dimension the balancer raked."""
    target = version.target
    goals: dict[str, dict[str, float]] = {
        name: dict(getattr(target, name))
        for name in ("capability", "difficulty", "domain", "source")
        if getattr(target, name)
    }
    if target.recovery_share is not None:
        share = target.recovery_share
        goals["outcome"] = {"recovery": share, "success": 1.0 - share}
    rows = []
    for dimension, shares in sorted(version.achieved.items()):
        for value, share in sorted(shares.items()):
            goal = goals.get(dimension, {}).get(value)
            rows.append((dimension, value, f"{share:.3f}", "-" if goal is None else f"{goal:.3f}"))
    if not rows:
        return ""
    intro = "The balancer's sampling weights against the target mix:\n"
    return intro + "\n" + _table(("dimension", "value", "achieved", "target"), rows)


_MASK_TEXT = """\
`trained` has one flag per message of `messages`: `true` marks the assistant turns the
loss covers. System, user and tool messages are never trained on, and stay in the
context. An assistant turn is left out (`false`) when its step was marked erroneous: by
the person who decided the item, when one did (they saw the curator's marks pre-selected
and kept or changed them), otherwise by the curator (steps whose feedback is a typed
error, or that carry an injected fault). The feedback of a masked step stays in the
context, and the turns after it, the verified recovery, stay supervised. Where a person
corrected the final answer, the last turn says the correction and is trained.
"""


def _mask_table(tally: CardTally) -> str:
    rows = [
        ("assistant turns", tally.assistant_turns),
        ("trained", tally.trained_turns),
        ("masked", tally.masked_turns),
        ("trajectories with masked turns", tally.masked_rows),
        ("trajectories with a corrected answer", tally.corrected),
    ]
    return _table(("turns", "count"), rows)


_SFT_COLUMNS = (
    (
        "`messages`",
        "the chat as the OpenAI-compatible policy has it at inference: system prompt, goal, "
        'assistant turns with `tool_calls` (`{"id", "type": "function", "function": {"name", '
        '"arguments"}}`, arguments as a JSON object), `tool` messages with the feedback, and '
        "the nudges after malformed output",
    ),
    ("`tools`", "the functions offered, in the chat-completions `tools` shape"),
    ("`trained`", "one flag per message: the assistant turns the loss covers"),
    ("`weight`", "sampling weight towards the target mix"),
    ("`trajectory_id`, `task_id`, `fingerprint`", "identities in the flywheel's catalog"),
    ("`capabilities`, `difficulty`", "the task's labels"),
    ("`outcome`", "`success`, or `recovery` (a verified success after an error)"),
    (
        "`decision`, `human`",
        "the gate's final decision (`approve`, `correct`), and whether a person made it",
    ),
    ("`masked_steps`", "the steps whose assistant turns are masked"),
    ("`correction`", "a person's corrected final answer, if any"),
    ("`policy`", "the generating policy, `name@version`"),
)
_RL_COLUMNS = (
    ("`task_id`, `fingerprint`, `seed`", "the task, and the seed of its initial state"),
    (
        "`task_spec`",
        "the full task spec as JSON: goal, candidate tools, initial conditions, verifier, "
        "reference plan",
    ),
    ("`verifier`", "the verifier spec as JSON"),
    ("`capabilities`, `difficulty`, `goal`", "the task's labels and goal"),
    ("`max_steps`", "the step budget its trajectories ran under"),
    ("`prompt`, `tools`", "the opening messages (system prompt, goal) and the functions offered"),
)


def _columns() -> str:
    return "\n".join(
        [
            "`sft`, one row per trajectory:\n",
            _table(("column", "meaning"), _SFT_COLUMNS),
            "`rl_tasks`, one row per distinct task:\n",
            _table(("column", "meaning"), _RL_COLUMNS),
        ]
    )


def _loading(fmt: str) -> str:
    if fmt == "hf":
        load = (
            "from datasets import load_from_disk\n\n"
            'data = load_from_disk("hf")  # a DatasetDict\n'
            'sft, rl_tasks = data["sft"], data["rl_tasks"]'
        )
    else:
        load = (
            "from datasets import load_dataset\n\n"
            'sft = load_dataset("parquet", data_files="parquet/sft.parquet", split="train")\n'
            "rl_tasks = load_dataset(\n"
            '    "parquet", data_files="parquet/rl_tasks.parquet", split="train"\n'
            ")"
        )
    return f"""\
Paths are relative to this folder; on the Hub, `load_dataset(REPO, "sft")` and
`load_dataset(REPO, "rl_tasks")` read the configurations above.

```python
{load}

row = sft[0]
text = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
```

An `rl_tasks` row rebuilds its task; the flywheel's sandbox resets to it and verifies a
rollout:

```python
from contract import TaskSpec
from envs.sandbox import MobileSandbox
from envs.verification import verify

task = TaskSpec.model_validate_json(rl_tasks[0]["task_spec"])
sandbox = MobileSandbox()
sandbox.reset(task)  # the seeded initial state
# ... a policy acts through sandbox.execute(action), giving steps ...
verdict = verify(task.verifier, steps, sandbox.evidence())
```
"""


def trl_snippet(fmt: str) -> str:
    """A few lines that train a model on the ``sft`` split with TRL's ``SFTTrainer``,
    honouring ``trained``: the flywheel's ``tokenize_rows`` turns the flags into an
    ``assistant_masks`` column of a pre-tokenized dataset, from which TRL builds the
    labels. ``BASE`` and ``STEPS`` are for the reader to set."""
    if fmt == "hf":
        loader, split = "load_from_disk", 'load_from_disk("hf")["sft"]'
    else:
        loader = "load_dataset"
        split = 'load_dataset("parquet", data_files="parquet/sft.parquet", split="train")'
    return (
        "import torch\n"
        f"from datasets import {loader}\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "from trl import SFTConfig, SFTTrainer\n"
        "from training.sft import tokenize_rows  # the flywheel's: trained -> assistant_masks\n"
        "\n"
        "tokenizer = AutoTokenizer.from_pretrained(BASE)\n"
        f"train = tokenize_rows(tokenizer, {split}, max_length=4096).dataset()\n"
        "model = AutoModelForCausalLM.from_pretrained(BASE)\n"
        'config = SFTConfig("out", max_steps=STEPS, max_length=4096, '
        "bf16=torch.cuda.is_available())\n"
        "SFTTrainer(model, config, train_dataset=train, processing_class=tokenizer).train()\n"
    )


def _trl(fmt: str) -> str:
    return (
        "`SFTTrainer` on `messages` as they are would train every assistant turn, the "
        "masked ones too: TRL does not read `trained`. It does read a pre-tokenized dataset "
        "(`input_ids`) with an `assistant_masks` column, and builds the labels from it. With "
        "the flywheel installed, `training.sft.tokenize_rows` renders each row with the "
        "model's chat template and marks the tokens of the trained turns (rows with none are "
        "dropped), so plain TRL trains what the flywheel trains. Give both the same "
        "`max_length`: TRL cuts rows to its own (1,024 tokens unless told) and leaves out "
        "a row whose trained tokens the cut removed. The flywheel's trainer also draws "
        "the rows in proportion to `weight` (`sft.weighted`), and its RL the tasks in "
        "proportion to the summed `weight` of their `sft` rows (`rl.weighted`), which plain "
        "TRL does not: every row is drawn once an epoch, in the rows' own mix rather than "
        "the target's.\n\n"
        f"```python\n{trl_snippet(fmt)}```\n"
    )


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    """A YAML scalar: JSON's double-quoted strings are valid YAML."""
    return json.dumps(text)

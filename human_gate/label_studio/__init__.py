"""The Label Studio gate: the labeling interface and the view of a trajectory in it.

``labeling`` holds the labeling config; ``view`` renders gate items into task data and
pre-annotations and reads annotations back; ``gate`` sends items and syncs annotations;
``consensus`` resolves several annotators and measures their agreement.
"""

from human_gate.label_studio.consensus import (
    AgreementReport,
    ConsensusRule,
    Vote,
    agreement_report,
    consensus_rule,
    resolve,
)
from human_gate.label_studio.gate import LabelStudioGate, LabelStudioGateConfig
from human_gate.label_studio.labeling import LABEL_CONFIG, RejectReason, labeling_config
from human_gate.label_studio.view import (
    CURATOR_VERSION,
    AnnotationValues,
    parse_annotation,
    prediction,
    render_html,
    task_data,
)

__all__ = [
    "CURATOR_VERSION",
    "LABEL_CONFIG",
    "AgreementReport",
    "AnnotationValues",
    "ConsensusRule",
    "LabelStudioGate",
    "LabelStudioGateConfig",
    "RejectReason",
    "Vote",
    "agreement_report",
    "consensus_rule",
    "labeling_config",
    "parse_annotation",
    "prediction",
    "render_html",
    "resolve",
    "task_data",
]

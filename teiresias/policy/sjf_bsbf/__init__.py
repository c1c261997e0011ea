"""SJF-BSBF: shortest job first with best sharing benefit first (docs/sjf-bsbf.md)."""

from teiresias.policy.sjf_bsbf.model import SharingModel, SharingProfile
from teiresias.policy.sjf_bsbf.pair import PairDecision, PairTimes, decide_pair
from teiresias.policy.sjf_bsbf.policy import SjfBsbfPolicy, SjfFfsPolicy

__all__ = [
    "PairDecision",
    "PairTimes",
    "SharingModel",
    "SharingProfile",
    "SjfBsbfPolicy",
    "SjfFfsPolicy",
    "decide_pair",
]

"""Themis (NSDI'20): finish-time fair GPU sharing by round-by-round partial-allocation auctions.

One job per module: ``apps`` (which jobs form an app), ``rho`` (finish-time
fairness, Equation 1), ``auction`` (the partial-allocation auction,
Pseudocode 1 lines 5-12, solved as a MILP with HiGHS), ``policy`` (the
round: filtering, auction, leftovers, leases). Definitions: docs/themis.md.
The policy is imported from ``teiresias.policy.themis.policy`` so that reading
a job's app (simulator records, ``teiresias queue``) does not load scipy.
"""

from teiresias.policy.themis.apps import app_of

__all__ = ["app_of"]

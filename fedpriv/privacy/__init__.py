"""Differential-privacy core: mechanisms, one ledger per run, calibration, audits.

Pure: imports no torch, no Flower and no models.
"""

import importlib
from typing import TYPE_CHECKING

# Names load on first use (PEP 562). Importing any submodule runs this file
# first, and the Flower ClientApp imports ``fedpriv.privacy.randomness`` in
# every process (one per message): eager imports here would load dp-accounting
# and scipy there too (~0.7 s more on a ~0.9 s cold start). One entry per name,
# the module that defines it (checked by tests/privacy/test_package.py).
_SOURCES = {
    "accounting": ("Accounting", "account", "pld_epsilon", "rdp_curve", "rdp_epsilon"),
    "audit": (
        "AuditResult",
        "audit_epsilon",
        "chi_square_selection_test",
        "clopper_pearson",
        "ks_noise_test",
    ),
    "analytic_gaussian": ("analytic_gaussian_noise_multiplier", "gaussian_delta"),
    "calibration": (
        "Calibration",
        "calibrate_gaussian_noise_multiplier",
        "calibrate_noise_multiplier",
        "subsampled_gaussian_event",
    ),
    "events": (
        "ApproxDpEvent",
        "BoundedRangeDpEvent",
        "EffectiveRateDpEvent",
        "ParticipationDpEvent",
        "PureDpEvent",
        "TunedSelectionDpEvent",
        "event_from_dict",
        "event_to_dict",
    ),
    "ledger": ("PrivacyBudgetExceededError", "PrivacyLedger"),
    "ledger_report": ("LedgerEntry", "PrivacyBudget", "PrivacyReport"),
    "mechanisms": ("GaussianMechanism", "LaplaceMechanism", "Mechanism"),
    "participation": (
        "ParticipationAccounting",
        "calibrate_participation_noise_multiplier",
    ),
    "selection": ("ExponentialMechanism", "GaussianReportNoisyMax", "PermuteAndFlip"),
    "sparse_threshold": (
        "SparseThreshold",
        "SparseThresholdCalibration",
        "calibrate_sparse_threshold",
        "largest_rho",
        "lemma7_parameters",
        "queries_per_record",
        "staged_queries_per_record",
        "theorem6_delta",
        "two_sided_delta",
        "zcdp_delta",
    ),
    "tuning": ("RunsDistribution",),
    "tuning_calibration": ("TuningCalibration", "calibrate_base_epsilon"),
}
_WHERE = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'fedpriv.privacy' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fedpriv.privacy.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


if TYPE_CHECKING:
    from fedpriv.privacy.accounting import (
        Accounting,
        account,
        pld_epsilon,
        rdp_curve,
        rdp_epsilon,
    )
    from fedpriv.privacy.analytic_gaussian import (
        analytic_gaussian_noise_multiplier,
        gaussian_delta,
    )
    from fedpriv.privacy.audit import (
        AuditResult,
        audit_epsilon,
        chi_square_selection_test,
        clopper_pearson,
        ks_noise_test,
    )
    from fedpriv.privacy.calibration import (
        Calibration,
        calibrate_gaussian_noise_multiplier,
        calibrate_noise_multiplier,
        subsampled_gaussian_event,
    )
    from fedpriv.privacy.events import (
        ApproxDpEvent,
        BoundedRangeDpEvent,
        EffectiveRateDpEvent,
        ParticipationDpEvent,
        PureDpEvent,
        TunedSelectionDpEvent,
        event_from_dict,
        event_to_dict,
    )
    from fedpriv.privacy.ledger import PrivacyBudgetExceededError, PrivacyLedger
    from fedpriv.privacy.ledger_report import LedgerEntry, PrivacyBudget, PrivacyReport
    from fedpriv.privacy.mechanisms import GaussianMechanism, LaplaceMechanism, Mechanism
    from fedpriv.privacy.participation import (
        ParticipationAccounting,
        calibrate_participation_noise_multiplier,
    )
    from fedpriv.privacy.selection import (
        ExponentialMechanism,
        GaussianReportNoisyMax,
        PermuteAndFlip,
    )
    from fedpriv.privacy.sparse_threshold import (
        SparseThreshold,
        SparseThresholdCalibration,
        calibrate_sparse_threshold,
        largest_rho,
        lemma7_parameters,
        queries_per_record,
        staged_queries_per_record,
        theorem6_delta,
        two_sided_delta,
        zcdp_delta,
    )
    from fedpriv.privacy.tuning import RunsDistribution
    from fedpriv.privacy.tuning_calibration import TuningCalibration, calibrate_base_epsilon

__all__ = [
    "Accounting",
    "ApproxDpEvent",
    "AuditResult",
    "BoundedRangeDpEvent",
    "Calibration",
    "EffectiveRateDpEvent",
    "ExponentialMechanism",
    "GaussianMechanism",
    "GaussianReportNoisyMax",
    "LaplaceMechanism",
    "LedgerEntry",
    "Mechanism",
    "ParticipationAccounting",
    "ParticipationDpEvent",
    "PermuteAndFlip",
    "PrivacyBudget",
    "PrivacyBudgetExceededError",
    "PrivacyLedger",
    "PrivacyReport",
    "PureDpEvent",
    "RunsDistribution",
    "SparseThreshold",
    "SparseThresholdCalibration",
    "TunedSelectionDpEvent",
    "TuningCalibration",
    "account",
    "analytic_gaussian_noise_multiplier",
    "audit_epsilon",
    "calibrate_base_epsilon",
    "calibrate_gaussian_noise_multiplier",
    "calibrate_noise_multiplier",
    "calibrate_participation_noise_multiplier",
    "calibrate_sparse_threshold",
    "chi_square_selection_test",
    "clopper_pearson",
    "event_from_dict",
    "event_to_dict",
    "gaussian_delta",
    "ks_noise_test",
    "largest_rho",
    "lemma7_parameters",
    "pld_epsilon",
    "queries_per_record",
    "rdp_curve",
    "rdp_epsilon",
    "staged_queries_per_record",
    "subsampled_gaussian_event",
    "theorem6_delta",
    "two_sided_delta",
    "zcdp_delta",
]

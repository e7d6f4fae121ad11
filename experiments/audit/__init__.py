"""Empirical privacy audits of whole learners (``python -m fedpriv.experiments.audit_learners``)."""

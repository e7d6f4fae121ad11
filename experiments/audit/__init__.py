"""Empirical privacy audits of whole learners (``python -m experiments.audit_learners``)."""

"""Participation and heterogeneity ablations (issue 9; benchmark paper §5.6).

``python -m fedpriv.experiments.ablate <study>`` is the entry point; see its docstring.
Cells, cache, pool, statistics and report helpers are the issue-8 runner's
(:mod:`fedpriv.experiments.bench`).
"""

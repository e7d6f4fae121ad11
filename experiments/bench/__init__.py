"""The matched-accounting benchmark (issue 8): configs, cells, statistics, analyses, report.

``python -m fedpriv.experiments.benchmark`` is the entry point; see its docstring.
"""

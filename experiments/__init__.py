"""Benchmark and ablation entry points (``python -m experiments.<name>``)."""

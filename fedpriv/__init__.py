"""fedpriv: federated learning on sensitive tabular data under record-level DP.

The library layer. It never imports the application layers (``strategies``,
``clients``, ``server``, ``experiments``) nor Flower.
"""

__version__ = "0.1.0"

"""Input errors that name the file, the column and the line (:mod:`fedpriv.errors`)."""

from __future__ import annotations

from fedpriv.errors import DataError

__all__ = ["DataError"]

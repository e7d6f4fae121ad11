"""The built-in learners' records: the one place each is described.

The records are data, ``fedpriv/builtin_methods.toml`` (one table per method, each
key a field of :class:`~fedpriv.methods.Method`), read here into ``Method`` records.
:mod:`fedpriv.methods` registers them on import (unchecked there: every part's
import is deferred, so the Flower ClientApp never imports a server half; a test
checks every part of every record with the registry's own checker,
:mod:`fedpriv.method_check`). A plugin's records live in its own package and
reach the registry through the ``fedpriv.methods`` entry-point group.
"""

import tomllib
from importlib import resources

from fedpriv.methods import Method

#: The records' file, beside this module (installed with the package).
RECORDS = "builtin_methods.toml"


def _records() -> tuple[Method, ...]:
    text = resources.files("fedpriv").joinpath(RECORDS).read_text(encoding="utf-8")
    return tuple(Method(name=name, **fields) for name, fields in tomllib.loads(text).items())


BUILT_INS = _records()

"""A small schema with a patient (unit) column, for the tests of patient-level privacy."""

#: A binary target ``y`` (positive "1"), as the test schemas declare it.
BINARY_TARGET = """[target]
column = "y"
positive = ["1"]
labels = ["0", "1"]
"""
#: Hospitals in ``hosp``, patients in ``pid`` (at most 2 records each), one numeric ``x``.
WARD = (
    """name = "ward"
client_column = "hosp"
unit_column = "pid"
max_records_per_unit = 2
unit_scope = "node"
"""
    + BINARY_TARGET
    + """[[columns]]
name = "x"
type = "numeric"
bounds = [0, 1]
"""
)
#: The same with a categorical column ``c`` (levels a, b).
WARD_WITH_LEVELS = WARD + '[[columns]]\nname = "c"\ntype = "categorical"\ncategories = ["a", "b"]\n'

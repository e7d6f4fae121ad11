"""Data layer: public schemas, DP-safe encoding, corpora, splits and partitioners.

Nothing here computes a statistic of the private rows: bounds, domains and
label sets come from public schemas; every clip, unseen value and dropped row
is counted in a load report.
"""

from fedpriv.data.corpora import (
    client_counts,
    data_dir,
    load_adult,
    load_brfss,
    load_dataset,
    load_diabetes130,
    load_for_run,
    load_heart,
    load_synthetic,
    schema,
)
from fedpriv.data.csv import load_csv, load_csv_whole, load_train_test
from fedpriv.data.dataset import TabularDataset, check_training_classes
from fedpriv.data.encode import (
    Encoded,
    LoadReport,
    box_standardisation,
    encode,
    feature_columns,
    feature_space_numeric,
)
from fedpriv.data.encounters import load_diabetes130_encounters
from fedpriv.data.errors import DataError
from fedpriv.data.partition import dirichlet, iid, label_skew, natural, zipf
from fedpriv.data.schema import (
    BinaryColumn,
    CategoricalColumn,
    Missing,
    NumericColumn,
    Schema,
    SchemaError,
    Target,
    Transform,
)
from fedpriv.data.split import Split, make_split
from fedpriv.data.synthetic import SyntheticConfig, make_synthetic
from fedpriv.records import check_labels, check_partition

__all__ = [
    "BinaryColumn",
    "CategoricalColumn",
    "DataError",
    "Encoded",
    "LoadReport",
    "Missing",
    "NumericColumn",
    "Schema",
    "SchemaError",
    "Split",
    "SyntheticConfig",
    "TabularDataset",
    "Target",
    "Transform",
    "box_standardisation",
    "check_labels",
    "check_partition",
    "check_training_classes",
    "client_counts",
    "data_dir",
    "dirichlet",
    "encode",
    "feature_columns",
    "feature_space_numeric",
    "iid",
    "label_skew",
    "load_adult",
    "load_brfss",
    "load_csv",
    "load_csv_whole",
    "load_dataset",
    "load_diabetes130",
    "load_diabetes130_encounters",
    "load_for_run",
    "load_heart",
    "load_synthetic",
    "load_train_test",
    "make_split",
    "make_synthetic",
    "natural",
    "schema",
    "zipf",
]

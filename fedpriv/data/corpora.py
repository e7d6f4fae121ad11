"""Loaders for the bundled real corpora (package data, ``fedpriv/data/bundled``), never downloading.

Each loader applies its dataset's documented preprocessing (every dropped
row is counted with its reason in the load report), encodes with the public
schema in ``fedpriv/data/schemas/`` and splits with a recorded seed. Encoded
arrays are cached by input checksum + schema digest + options.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import os
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from fedpriv.data.dataset import TabularDataset, cached
from fedpriv.data.encode import Encoded, LoadReport, encode
from fedpriv.data.errors import DataError
from fedpriv.data.schema import Schema, Target
from fedpriv.data.split import make_split, stratified_indices
from fedpriv.data.synthetic import load_synthetic
from fedpriv.data.table import read_table
from fedpriv.validation import check_count

ADULT_COLUMNS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
]
HEART_COLUMNS = [
    "age",
    "sex",
    "cp",
    "trestbps",
    "chol",
    "fbs",
    "restecg",
    "thalach",
    "exang",
    "oldpeak",
    "slope",
    "ca",
    "thal",
    "num",
]
HEART_CENTRES = ("cleveland", "hungarian", "switzerland", "va")
# Diabetes 130-US discharge dispositions meaning death (11, 19-21) or hospice (13, 14).
EXPIRED_OR_HOSPICE = (11, 13, 14, 19, 20, 21)


#: Bundled corpora that are another's file and columns with a different target:
#: name -> (schema it derives from, its target, description).
DERIVED = {
    "brfss3": (
        "brfss",
        Target(column="Diabetes_012", labels=("0", "1", "2")),
        "BRFSS 2015: no diabetes (0) / prediabetes (1) / diabetes (2)",
    ),
}


def schema(name: str) -> Schema:
    """The bundled public schema ``name`` (adult, heart, diabetes130, brfss, brfss3)."""
    if name in DERIVED:
        base, target, description = DERIVED[name]
        return dataclasses.replace(schema(base), name=name, target=target, description=description)
    ref = resources.files("fedpriv.data").joinpath("schemas").joinpath(f"{name}.toml")
    with resources.as_file(ref) as path:
        return Schema.from_toml(path)


#: The corpora shipped inside the package (licences and provenance: ``DATA_CARD.md``
#: there; every file's sha256 as stored: ``SHA256SUMS``).
BUNDLED = Path(__file__).resolve().parent / "bundled"


def data_dir() -> Path:
    """Root of the corpora: ``$FEDPRIV_DATA_DIR`` if set, else the bundled copy.

    The bundled corpora are package data of ``fedpriv.data`` (``bundled/``), so a
    bare clone or an installed wheel needs nothing beside it. The variable points
    the loaders at another copy with the same layout (the launchers pass the
    resolved folder to the Flower processes they start).
    """
    env = os.environ.get("FEDPRIV_DATA_DIR")
    root = Path(env) if env else BUNDLED
    if not (root / "adult").is_dir():
        raise DataError(
            code="datasets_not_found",
            message=f"no corpora in {root} (from "
            + ("$FEDPRIV_DATA_DIR" if env else "the package")
            + "): expected the folders adult/, heart_disease/, diabetes_130us/, "
            "brfss2015_diabetes/",
        )
    return root


def verify_bundled(root: Path | None = None) -> list[str]:
    """The files under ``root`` (default: the bundled copy) whose sha256 differs from
    ``SHA256SUMS`` there, or that are missing; empty when every file checks."""
    root = BUNDLED if root is None else root
    bad = []
    for line in (root / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        path = root / name.strip()
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            bad.append(name.strip())
    return bad


def _drop(
    frame: pd.DataFrame, lines: np.ndarray, keep: np.ndarray, reason: str, report: LoadReport
) -> tuple[pd.DataFrame, np.ndarray]:
    report.drop(reason, int((~keep).sum()))
    return frame.loc[keep].reset_index(drop=True), lines[keep]


# --------------------------------------------------------------------------
def load_adult(
    *, split_seed: int = 0, val_fraction: float = 0.2, use_cache: bool = True
) -> TabularDataset:
    """UCI Adult: official train (32,561) and test (16,281) files, 14 features.

    The validation part is carved from the training file, stratified by label.
    """
    sch = schema("adult")
    root = data_dir() / "adult"
    files = [root / "adult.data.gz", root / "adult.test.gz"]

    def build() -> TabularDataset:
        report = LoadReport(source="adult")
        frames, encs = [], []
        for path, skip in zip(files, (0, 1), strict=True):
            frame, lines = read_table(
                path, sch, names=ADULT_COLUMNS, skiprows=skip, skipinitialspace=True
            )
            encs.append(encode(frame, sch, source=str(path), lines=lines, report=report))
            frames.append(len(frame))
        report.n_rows = sum(frames)
        y = np.concatenate([e.y for e in encs])
        split = make_split(
            y,
            seed=split_seed,
            val_fraction=val_fraction,
            test_rows=np.arange(frames[0], frames[0] + frames[1]),
        )
        return TabularDataset.from_encoded("adult", sch, encs, split, report)

    opts = {"split_seed": split_seed, "val_fraction": val_fraction}
    return cached("adult", files, sch, opts, build, use_cache=use_cache)


# --------------------------------------------------------------------------
def load_heart(
    *, split_seed: int = 0, val_fraction: float = 0.2, use_cache: bool = True
) -> TabularDataset:
    """Fed-Heart-Disease: 4 hospitals, FLamby preprocessing, 66/34 split within each."""
    sch = schema("heart")
    root = data_dir() / "heart_disease"
    files = [root / f"processed.{c}.data" for c in HEART_CENTRES]

    def build() -> TabularDataset:
        report = LoadReport(source="heart")
        parts, centre_codes, encs = [], [], []
        for code, path in enumerate(files):
            frame, lines = read_table(path, sch, names=HEART_COLUMNS)
            frame = frame.drop(columns=list(sch.drop))
            keep = frame.notna().all(axis=1).to_numpy()
            frame, lines = _drop(frame, lines, keep, "rows with a missing value (FLamby)", report)
            encs.append(encode(frame, sch, source=str(path), lines=lines, report=report))
            centre_codes.append(np.full(len(frame), code, dtype=np.int64))
            parts.append(len(frame))
        report.n_rows = sum(parts)
        y = np.concatenate([e.y for e in encs])
        clients = np.concatenate(centre_codes)
        split = make_split(
            y, seed=split_seed, test_fraction=0.34, val_fraction=val_fraction, strata=clients
        )
        return TabularDataset.from_encoded(
            "heart", sch, encs, split, report, clients=clients, client_names=HEART_CENTRES
        )

    opts = {"split_seed": split_seed, "val_fraction": val_fraction}
    return cached("heart", files, sch, opts, build, use_cache=use_cache)


# --------------------------------------------------------------------------
def diabetes130_specialties(sch: Schema, n_clients: int) -> tuple[int, list[str]]:
    """K and the K − 1 largest specialties of the schema's public list (the clients)."""
    k = check_count("n_clients", n_clients, minimum=2)
    largest = list(sch.extra["largest_specialties"])
    if k - 1 > len(largest):
        raise ValueError(f"n_clients must lie in [2, {len(largest) + 1}]; got {n_clients}")
    return k, largest[: k - 1]


def read_diabetes130(
    sch: Schema, report: LoadReport, *, every_encounter: bool
) -> tuple[pd.DataFrame, Encoded]:
    """The file in ``encounter_id`` order, expired and hospice discharges dropped,
    encoded; only each patient's first encounter unless ``every_encounter``."""
    path = diabetes130_path()
    frame, lines = read_table(path, sch)
    order = np.argsort(frame["encounter_id"].to_numpy(dtype=np.int64), kind="stable")
    frame, lines = frame.iloc[order].reset_index(drop=True), lines[order]
    if not every_encounter:
        first = ~frame["patient_nbr"].duplicated(keep="first").to_numpy()
        frame, lines = _drop(frame, lines, first, "repeat encounters of a patient", report)
    disp = pd.to_numeric(frame["discharge_disposition_id"], errors="coerce")
    keep = ~disp.isin(EXPIRED_OR_HOSPICE).to_numpy()
    frame, lines = _drop(frame, lines, keep, "expired or hospice discharges", report)
    return frame, encode(frame, sch, source=str(path), lines=lines, report=report)


def diabetes130_path() -> Path:
    """The bundled Diabetes 130-US file."""
    return data_dir() / "diabetes_130us" / "diabetic_data.csv.gz"


def load_diabetes130(
    *, n_clients: int = 5, split_seed: int = 0, val_fraction: float = 0.2, use_cache: bool = True
) -> TabularDataset:
    """Diabetes 130-US in the benchmark paper's setup, clients by medical specialty.

    One encounter per patient (the first by ``encounter_id``), expired and
    hospice discharges dropped; clients are the ``n_clients - 1`` largest
    specialties (a fixed list in the schema) plus one "other/missing" client.
    With one row per patient, the stratified row split is a patient split.
    Every encounter, patients as units: :func:`fedpriv.data.encounters.load_diabetes130_encounters`.
    """
    sch = schema("diabetes130")
    k, largest = diabetes130_specialties(sch, n_clients)

    def build() -> TabularDataset:
        report = LoadReport(source="diabetes130")
        frame, enc = read_diabetes130(sch, report, every_encounter=False)
        index = {s: i for i, s in enumerate(largest)}
        clients = frame[sch.client_column].map(index).fillna(k - 1).to_numpy(dtype=np.int64)
        split = make_split(enc.y, seed=split_seed, val_fraction=val_fraction)
        return TabularDataset.from_encoded(
            "diabetes130", sch, [enc], split, report, clients=clients,
            client_names=(*largest, "other/missing"),
        )  # fmt: skip

    opts = {"n_clients": k, "split_seed": split_seed, "val_fraction": val_fraction}
    return cached("diabetes130", [diabetes130_path()], sch, opts, build, use_cache=use_cache)


# --------------------------------------------------------------------------
def load_brfss(
    *,
    full: bool = False,
    n_rows: int = 60_000,
    split_seed: int = 0,
    val_fraction: float = 0.2,
    use_cache: bool = True,
    multiclass: bool = False,
) -> TabularDataset:
    """BRFSS 2015 any-diabetes, stratified subsample of ``n_rows`` (paper: 60,000).

    ``full=True`` keeps all 253,680 rows. ``multiclass=True``: the three classes
    no diabetes / prediabetes / diabetes (corpus ``brfss3``), stratified by
    them. No natural clients: partition the training rows with
    :mod:`fedpriv.data.partition` (the paper: K = 5).
    """
    name = "brfss3" if multiclass else "brfss"
    sch = schema(name)
    n_keep = check_count("n_rows", n_rows, minimum=100)
    path = data_dir() / "brfss2015_diabetes" / "diabetes_012_health_indicators_BRFSS2015.csv.gz"

    def build() -> TabularDataset:
        report = LoadReport(source=name)
        frame, lines = read_table(path, sch)
        enc = encode(frame, sch, source=str(path), lines=lines, report=report)
        X, X_ord, y = enc.X, enc.X_ordinal, enc.y
        if not full and n_keep < len(y):
            rng = np.random.default_rng(np.random.SeedSequence([split_seed, 1]))
            _, keep = stratified_indices(y, n_keep / len(y), rng)
            report.drop("rows outside the stratified subsample", len(y) - keep.size)
            X, X_ord, y = X[keep], X_ord[keep], y[keep]
            report.n_rows = int(keep.size)
        split = make_split(y, seed=split_seed, val_fraction=val_fraction)
        return TabularDataset(
            name=name,
            schema=sch,
            X=X,
            X_ordinal=X_ord,
            y=y,
            feature_names=sch.feature_names,
            split=split,
            report=report,
        )

    opts = {"full": full, "n_rows": n_keep, "split_seed": split_seed, "val_fraction": val_fraction}
    return cached(name, [path], sch, opts, build, use_cache=use_cache)


LOADERS = {
    "adult": load_adult,
    "heart": load_heart,
    "diabetes130": load_diabetes130,
    "brfss": load_brfss,
    "brfss3": functools.partial(load_brfss, multiclass=True),
    "synthetic": load_synthetic,
}


def unknown_dataset(name: object) -> DataError:
    """The error for a corpus name that is not bundled (a :class:`DataError`: exit 2)."""
    close = difflib.get_close_matches(str(name), sorted(LOADERS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return DataError(
        f"dataset must be one of {sorted(LOADERS)}; got {name!r}{hint}; for your own file "
        "use --csv FILE --schema FILE",
        code="unknown_dataset",
    )


def client_counts(name: str) -> tuple[int, int | None]:
    """How many clients can hold corpus ``name``: (fewest, most), ``None`` = no limit.

    From the public schema alone, before any row is read: Heart is held by its
    4 hospitals, Diabetes 130-US by its K−1 largest specialties plus "other"
    (K ≤ the schema's list + 1); the others are split IID among any K.
    """
    if name not in LOADERS:
        raise unknown_dataset(name)
    if name == "heart":
        return len(HEART_CENTRES), len(HEART_CENTRES)
    if name == "diabetes130":
        return 2, len(schema("diabetes130").extra["largest_specialties"]) + 1
    return 1, None


def check_client_count(name: str, num_clients: int) -> None:
    """Refuse ``num_clients`` outside :func:`client_counts` of corpus ``name``."""
    lo, hi = client_counts(name)
    if not lo <= num_clients <= (hi or num_clients):
        allowed = f"[{lo}, {hi}]" if hi is not None else f"[{lo}, inf)"
        raise ValueError(
            f"num_clients must lie in {allowed} for dataset {name!r}; got {num_clients}"
        )


def load_for_run(name: str, *, num_clients: int, split_seed: int) -> TabularDataset:
    """Corpus ``name`` as a run of ``num_clients`` clients uses it (checked by
    :func:`client_counts`; a corpus whose clients depend on K is loaded for K)."""
    check_client_count(name, num_clients)
    if name == "diabetes130":
        return load_diabetes130(n_clients=num_clients, split_seed=split_seed)
    return load_dataset(name, split_seed=split_seed)


def load_dataset(name: str, **options) -> TabularDataset:
    """Load a corpus by name: ``adult``, ``heart``, ``diabetes130``, ``brfss``, ``synthetic``."""
    try:
        loader = LOADERS[name]
    except KeyError:
        raise unknown_dataset(name) from None
    return loader(**options)

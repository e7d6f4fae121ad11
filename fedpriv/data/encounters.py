"""Diabetes 130-US with every encounter: patients as units of privacy.

The benchmark paper, and :func:`fedpriv.data.load_diabetes130`, keep one
encounter per patient (the first), so that a record is a patient and
record-level DP protects patients. The file holds 101,766 encounters of 71,518
patients; after the expired and hospice discharges are dropped, 99,343
encounters of 69,990 patients (23 % of them with two or more, at most 40).
:func:`load_diabetes130_encounters` keeps them all:

* **clients**: a patient's encounters are held by the client of their *first*
  encounter's specialty (the K − 1 largest of the schema's list, else
  "other/missing"), so no patient spans clients (9 % of patients saw two
  specialties); the schema's ``unit_scope = "node"`` holds by construction;
* **split**: by patient (80/20 train/test, validation carved from train,
  stratified by client and the first encounter's label): every encounter of a
  test patient is a test row, so no training patient is scored;
* **unit**: with ``max_records_per_unit`` m the schema names ``patient_nbr`` as
  its unit (:mod:`fedpriv.privacy.units`): each node keeps at most m encounters
  per patient and the guarantee is per patient. Without it every encounter is
  a record: the guarantee is per encounter only, and a patient with k
  encounters is protected as k records are (group privacy: roughly k·ε), which
  is what record-level DP on this file does *not* protect.

Rows stay in ``encounter_id`` order, so a patient's first row is their first
encounter (the paper's protocol, on the same patients and split).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from fedpriv.data.corpora import (
    diabetes130_path,
    diabetes130_specialties,
    read_diabetes130,
    schema,
)
from fedpriv.data.dataset import TabularDataset, cached
from fedpriv.data.encode import LoadReport
from fedpriv.data.schema import Schema
from fedpriv.data.split import unit_split
from fedpriv.data.units import unit_codes

#: The file's patient id, the unit of the patient-level schema.
PATIENT = "patient_nbr"


def patient_schema(max_records_per_unit: int | None) -> Schema:
    """The bundled Diabetes 130-US schema, with ``patient_nbr`` as its unit of at most
    ``max_records_per_unit`` encounters (``None``: the schema as bundled, per record)."""
    base = schema("diabetes130")
    if max_records_per_unit is None:
        return base
    return dataclasses.replace(
        base,
        unit_column=PATIENT,
        max_records_per_unit=max_records_per_unit,
        unit_scope="node",
        description=base.description + ", every encounter, unit: a patient",
    )


def load_diabetes130_encounters(
    *,
    n_clients: int = 5,
    max_records_per_unit: int | None = None,
    split_seed: int = 0,
    val_fraction: float = 0.2,
    use_cache: bool = True,
) -> TabularDataset:
    """Every encounter of Diabetes 130-US (module docstring); ``max_records_per_unit``
    m: patient-level privacy with at most m encounters per patient, else per record."""
    sch = patient_schema(max_records_per_unit)
    k, largest = diabetes130_specialties(sch, n_clients)

    def build() -> TabularDataset:
        report = LoadReport(source="diabetes130 (every encounter)")
        frame, enc = read_diabetes130(sch, report, every_encounter=True)
        patients = unit_codes(frame[PATIENT].astype(str).str.strip().to_numpy(dtype=object))
        first = ~pd.Series(patients).duplicated().to_numpy()  # encounter_id order
        index = {s: i for i, s in enumerate(largest)}
        own = frame[sch.client_column].map(index).fillna(k - 1).to_numpy(dtype=np.int64)
        client_of = np.empty(patients.max() + 1, dtype=np.int64)
        client_of[patients[first]] = own[first]  # the first encounter's client
        clients = client_of[patients]
        split = unit_split(patients, enc.y, seed=split_seed, val_fraction=val_fraction,
                           strata=clients * 2 + enc.y)  # fmt: skip
        return TabularDataset.from_encoded(
            "diabetes130", sch, [enc], split, report, clients=clients,
            client_names=(*largest, "other/missing"),
        )  # fmt: skip

    opts = {"n_clients": k, "split_seed": split_seed, "val_fraction": val_fraction,
            "encounters": "all"}  # fmt: skip
    files = [diabetes130_path()]
    return cached("diabetes130-encounters", files, sch, opts, build, use_cache=use_cache)

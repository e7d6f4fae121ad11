"""The file-format and exit-code reference pages (the hook ``reference.py`` adds them)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

from reference_text import code, md, table


# -- file formats ----------------------------------------------------------------------
def _example_report() -> dict[str, Any]:
    """A real ledger's report: one subsampled Gaussian release (what privacy.json holds)."""
    import numpy as np

    from fedpriv.privacy import GaussianMechanism, PrivacyBudget, PrivacyLedger
    from fedpriv.privacy.randomness import SecretKey

    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=5.0)
    rng = SecretKey.generate().generator("noise")
    ledger.release(mech, np.zeros(3), rng=rng, sampling_probability=0.05, label="tree")
    return {**ledger.report().to_dict(), "complete": True}


def file_formats_page() -> str:
    from fedpriv.server import run_progress

    from fedpriv import artefact
    from fedpriv.federation import status
    from fedpriv.methods import model_classes
    from fedpriv.privacy import ledger, node_audit, node_budget

    outcome = status.run_outcome(rounds_planned=75, rounds=75, aborted=0, max_aborted_share=0.25)
    fields = [(f"`{f.name}`", f.type) for f in dataclasses.fields(status.RunOutcome)]
    parts = [
        "# File formats\n",
        "What fedpriv writes, read from the modules that write it. A run's results "
        "folder (`fedpriv run --out DIR`, or `<out-dir>/<run id>/` of a Flower run) holds "
        f"`{artefact.ARTEFACT_NAME}` and `privacy.json`; a Flower run adds "
        f"`{status.STATUS_FILE}`, `config.json`, `metrics.json`, `communication.json`, "
        f"`rounds.json` and `{run_progress.PROGRESS_FILE}` ([Run status and "
        "results](../how-to/run-status.md), [Look at a run](../how-to/look-at-a-run.md)).\n",
        f"## The model file: `{artefact.ARTEFACT_NAME}`\n",
        md(artefact.__doc__),
        f"Format `{artefact.FORMAT}`, version {artefact.FORMAT_VERSION}. Model classes a "
        "file may name (the registered methods' `model`, plugins' included):\n",
        "\n".join(f"* `{c}`" for c in sorted(model_classes())) + "\n",
        "## `privacy.json`: the privacy report\n",
        md(ledger.__doc__),
        "A report made by the ledger for one Poisson-subsampled Gaussian release "
        "(generated with this build; `fedpriv run --out` adds a `run` object: the data "
        "source, the resolved settings, the load's warnings, the status):\n",
        code(json.dumps(_example_report(), indent=1), "json"),
        f"## `{status.STATUS_FILE}`: the run's status\n",
        md(status.__doc__),
        table(("field", "type"), fields),
        "A completed run of 75 rounds (generated):\n",
        code(json.dumps(outcome.to_dict(), indent=1), "json"),
        f"## `{run_progress.PROGRESS_FILE}`: a Flower run's rounds as they go\n",
        md(run_progress.__doc__),
        f"## The node ledger: `{node_budget.LEDGER_FILE}`\n",
        md(node_budget.__doc__),
        "The file (JSON, written atomically at every admission) holds `runs`: per run id "
        "its `epsilon`, `delta` and `stages` (per stage its ε, its rounds, the stages the "
        "node admitted with what it derived itself, and the rounds used and answered); "
        "and `policy`: the limits in force ("
        + ", ".join(f"`{k}`" for k in node_budget.POLICY_KEYS)
        + "), so that the file alone says what is left. `fedpriv inspect STATE_DIR` "
        "prints it with the audit log's history, the chain verified.\n",
        f"## The node audit log: `{node_audit.AUDIT_FILE}`\n",
        md(node_audit.__doc__),
        "The kinds of entry and the fields each carries:\n",
        table(
            ("kind", "fields"),
            [(f"`{k}`", ", ".join(f"`{f}`" for f in v)) for k, v in node_audit.KINDS.items()],
        ),
    ]
    return "\n".join(parts)


# -- exit codes --------------------------------------------------------------------------
def exit_codes_page() -> str:
    from fedpriv.server import cli_errors, launch

    def rows(classes: tuple[type, ...], code_: int) -> list[tuple[str, ...]]:
        out = []
        for c in classes:
            first = inspect.cleandoc(c.__doc__ or "").split("\n\n")[0].replace("\n", " ")
            out.append((str(code_), f"`{c.__module__}.{c.__name__}`", md(first).strip()))
        return out

    parts = [
        "# Exit codes\n",
        "| code | meaning |\n|---|---|\n"
        "| 0 | a completed or degraded run (a degraded one with a warning) |\n"
        "| 1 | a failed run: one line with the reason |\n"
        "| 2 | a setting, schema, data or file error: one line naming the file or key, "
        "the value and what is allowed; for a Flower launcher, also a federation that "
        "could not start or a SuperLink that was lost |\n",
        "A traceback means a bug.\n",
        "## The `fedpriv` command\n",
        md(cli_errors.__doc__),
        "The classes behind codes 1 and 2 (read from `fedpriv.server.cli_errors`):\n",
        table(
            ("code", "error", "when"),
            rows(cli_errors.run_errors(), 1) + rows(cli_errors.input_errors(), 2),
        ),
        "## The Flower launchers\n",
        "`python -m fedpriv.server.simulate`, `python -m fedpriv.server.deploy` and "
        "`fedpriv run --flower` read the run's `status.json` (`flwr run --stream` exits 0 "
        "whatever happened), `fedpriv.server.launch.exit_code`:\n",
        md(launch.exit_code.__doc__),
    ]
    return "\n".join(parts)

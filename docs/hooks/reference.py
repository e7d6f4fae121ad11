"""MkDocs hook: the reference pages, generated from the code at every build.

``mkdocs.yml`` names this file under ``hooks:``. :func:`on_files` adds four pages
that exist only in the build (nothing is written into ``docs/``), each made from
the code the docs are built with, so that none of them can fall behind it:

* ``reference/cli.md``: every command and option of the ``fedpriv`` click group
  (:mod:`fedpriv.server.cli`), and the forwarded help of the commands that pass
  their arguments on (``deploy``, ``bench``, ``ablate``) and of the simulation
  launcher;
* ``reference/run-config.md``: the run's own keys (:class:`RunSettings`: default,
  range, the field's ``#:`` comment) and every registered method's keys (its
  configuration dataclass: default and range; installed plugins'
  included), as ``fedpriv run --help`` lists them;
* ``reference/file-formats.md``: the model file, ``privacy.json`` (a report
  made by a real ledger), ``status.json``, the node ledger and audit log;
* ``reference/exit-codes.md``: the error boundary's classes and codes.

The checkout that holds ``mkdocs.yml`` is put first on ``sys.path``, so the
pages describe that checkout's code whatever fedpriv is installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The generated pages, by their path under ``docs/``.
PAGES = (
    "reference/cli.md",
    "reference/run-config.md",
    "reference/file-formats.md",
    "reference/exit-codes.md",
)

GENERATED = (
    "<!-- Generated at build time by docs/hooks/reference.py from the code; "
    "edit the code, not this page. -->\n\n"
)


# -- MkDocs events -------------------------------------------------------------------
def on_files(files: Any, config: Any) -> Any:
    """Add the generated reference pages to the build's files (before the nav is read)."""
    from mkdocs.structure.files import File

    for uri, text in reference_pages().items():
        files.append(File.generated(config, uri, content=text))
    return files


def reference_pages() -> dict[str, str]:
    """``{path under docs/: Markdown}`` of every generated page."""
    os.environ.setdefault("FEDPRIV_CACHE_DIR", "off")  # a build writes no accounting cache
    makers = (cli_page, run_config_page, file_formats_page, exit_codes_page)
    return {uri: GENERATED + make() for uri, make in zip(PAGES, makers, strict=True)}


# -- text helpers ----------------------------------------------------------------------
_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")


def md(text: str | None) -> str:
    """A docstring's reStructuredText as Markdown: roles and ``literals`` as code,
    ``::`` literal blocks fenced."""
    text = inspect.cleandoc(text or "")

    def role(m: re.Match) -> str:  # ~a.b.C shows as C, a.b.C as itself
        short, target = m.groups()
        return f"``{target.rsplit('.', 1)[-1] if short else target}``"

    text = _ROLE.sub(role, text).replace("``", "`")
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            head = line.rstrip()
            out.append(head[:-3] if head.endswith(" ::") else head[:-1])
            block: list[str] = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            body = inspect.cleandoc("\n".join(block))
            out += ["", "```text", body, "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out).strip() + "\n"


def inline(text: str) -> str:
    """A docstring fragment as one line of Markdown (roles and literals as code)."""
    return md(text).strip().replace("\n", " ") if text else ""


def _shown(default: Any) -> str:
    """A default as a table shows it: ``unset`` for None, an Enum by its value."""
    if default is None:
        return "unset"
    return f"`{json.dumps(default) if default == '' else getattr(default, 'value', default)}`"


def cell(value: Any) -> str:
    """A value in a Markdown table cell (pipes escaped, one line)."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text.rstrip()}\n```\n"


def kebab(name: str) -> str:
    return name.replace("_", "-")


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines above each field of dataclass ``cls`` (its documentation)."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        field = re.match(r"(\w+)\s*:", stripped)
        if field and pending:
            comments[field.group(1)] = " ".join(pending)
        pending = []
    return comments


def _help_of(entry: Any, argv: list[str], prog: str) -> str:
    """What an argparse ``main(argv)`` prints for ``--help`` (its ``SystemExit`` caught),
    its program named ``prog``."""
    buf = io.StringIO()
    old, argv0 = os.environ.get("COLUMNS"), sys.argv[0]
    os.environ["COLUMNS"] = "100"  # one width, whatever the terminal
    sys.argv[0] = prog  # argparse names the program after it (here: what runs the build)
    try:
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            entry(argv)
    finally:
        sys.argv[0] = argv0
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return buf.getvalue()


def _without_keys(help_text: str) -> str:
    """A launcher's ``--help`` without its run-config epilog (the run-config page lists it)."""
    cut = help_text.find("run-config keys (")
    return help_text if cut < 0 else help_text[:cut].rstrip() + "\n"


# -- the CLI -------------------------------------------------------------------------
def commands() -> list[tuple[str, Any]]:
    """``[(path, click command)]`` of every ``fedpriv`` command, groups' subcommands
    included, in the group's order (``fedpriv`` itself first)."""
    import click
    from fedpriv.server.cli import cli

    out: list[tuple[str, Any]] = []

    def walk(path: str, cmd: Any) -> None:
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(click.Context(cmd)):
                walk(f"{path} {name}", cmd.get_command(click.Context(cmd), name))

    walk("fedpriv", cli)
    return out


def _param_rows(cmd: Any, ctx: Any) -> list[tuple[str, ...]]:
    """``(option, what, default)`` of each parameter, as ``--help`` states it."""
    import click

    rows = []
    for p in cmd.get_params(ctx):
        if isinstance(p, click.Argument):
            rows.append((f"`{p.human_readable_name}`", "argument", ""))
            continue
        record = p.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        default = p.get_default(ctx, call=False)
        if p.is_flag:
            shown = "off"
        elif isinstance(default, str | int | float) and not isinstance(default, bool):
            shown = f"`{default}`"
        else:  # unset (click's sentinel), None or a factory: the help text says it
            shown = ""
        what = help_text + (" Repeatable." if p.multiple else "")
        rows.append((f"`{names}`", what, shown))
    return rows


def _first_line(cmd: Any) -> str:
    return inspect.cleandoc(cmd.help or "").split("\n\n")[0].replace("\n", " ")


def cli_page() -> str:
    import click
    from fedpriv.server import deploy, simulate

    from fedpriv.federation.presets import get_preset

    listed = commands()
    parts = [
        "# The `fedpriv` command\n",
        "`pip install -e .` installs the console script `fedpriv` "
        "(`python -m fedpriv.server.cli` is the same). Every command below, its usage and "
        "options are read from the click group in `fedpriv.server.cli`; `fedpriv COMMAND "
        "--help` prints the same. Every error ends as one line and an exit code "
        "([Exit codes](exit-codes.md)); the keys `--set` takes are in "
        "[Run configuration](run-config.md).\n",
        table(("command", "what it does"),
              [(f"[`{path}`](#{_anchor(path)})", _first_line(cmd)) for path, cmd in listed]),
    ]  # fmt: skip
    forwarded = {
        "fedpriv deploy": lambda: _without_keys(
            _help_of(deploy.main, ["--help"], "fedpriv deploy")
        ),
        "fedpriv bench": lambda: _help_of(_main("fedpriv.experiments.benchmark"), ["--help"],
                                          "fedpriv bench"),
        "fedpriv ablate": lambda: _help_of(_main("fedpriv.experiments.ablate"), ["--help"],
                                           "fedpriv ablate"),
    }  # fmt: skip
    for path, cmd in listed:
        ctx = click.Context(cmd, info_name=path)
        level = "##" if path.count(" ") <= 1 else "###"
        parts.append(f"{level} {path}\n")
        parts.append(code(cmd.get_usage(ctx).replace("Usage: ", "")))
        parts.append(md(cmd.help or "") + "\n")
        if path in forwarded:
            parts.append("Every argument is forwarded; the options are the forwarded command's:\n")
            parts.append(code(forwarded[path]()))
        else:
            parts.append(table(("option", "what", "default"), _param_rows(cmd, ctx)))
        if path == "fedpriv run":
            parts.append(
                "`run --help` ends with every run-config key, its default and its allowed "
                "range: [Run configuration](run-config.md) lists them.\n"
            )
    parts += [
        "## python -m fedpriv.server.simulate\n",
        md(simulate.__doc__),
        f"Without `--preset` it runs the preset `{simulate.DEFAULT_PRESET}`: "
        f"`{json.dumps(dict(get_preset(simulate.DEFAULT_PRESET).values))}`; "
        "`--preset none` runs the defaults every entry point shares.\n",
        code(_without_keys(_help_of(simulate.main, ["--help"], SIMULATE))),
    ]
    return "\n".join(parts)


SIMULATE = "python -m fedpriv.server.simulate"


def _anchor(heading: str) -> str:
    """The id MkDocs' toc extension gives a heading of plain words."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def _main(module: str) -> Any:
    import importlib

    return importlib.import_module(module).main


# -- run configuration -----------------------------------------------------------------
def run_config_page() -> str:
    from fedpriv.federation.ranges import UNKNOWN, method_range, run_range
    from fedpriv.federation.settings import RunSettings, method_defaults
    from fedpriv.methods import methods

    run = RunSettings()
    notes = field_comments(RunSettings)
    rows = []
    for f in dataclasses.fields(RunSettings):
        if f.name == "config":
            continue
        allowed = run_range(kebab(f.name))
        default = "the method's δ" if f.name == "delta" else _shown(getattr(run, f.name))
        rows.append((f"`{kebab(f.name)}`", default, "" if allowed == UNKNOWN else allowed,
                     inline(notes.get(f.name, ""))))  # fmt: skip
    parts = [
        "# Run configuration\n",
        md(sys.modules["fedpriv.federation.settings"].__doc__),
        "Give a key with `--set key=value` (`fedpriv run`, `fedpriv cv`, the launchers) "
        "or `--run-config` (`flwr run`). The estimators take the same settings as "
        "keyword arguments, snake_case. Defaults and ranges below are read from "
        "`RunSettings` and each method's configuration dataclass: each field's declared "
        "constraint (`fedpriv.federation.constraints`), as `fedpriv run --help` prints them.\n",
        "## The run's own keys\n",
        table(("key", "default", "allowed", "what"), rows),
        "## Each method's keys\n",
        "`method = NAME` chooses the learner; its keys are the fields of its configuration "
        "dataclass (the paper's settings by default). A key of another method is refused.\n",
    ]
    for m in methods():
        cls = m.config_class
        parts.append(f"### `{m.name}`\n")
        facts = [
            f"{m.summary}.",
            f"Estimator `{m.estimator.split(':')[1]}`, settings `{cls.__name__}` "
            f"(`{m.config.split(':')[0]}`).",
            f"Default δ {m.delta:g}.",
            "Learns more than two classes." if m.multiclass else "Two classes only.",
            'Takes `noise = "distributed"`.' if m.distributed_noise else "Central noise only.",
        ]
        parts.append(" ".join(facts) + "\n")
        rows = []
        for key, default in method_defaults(m).items():
            rows.append((f"`{kebab(key)}`", _shown(default), method_range(m.name, kebab(key))))
        parts.append(table(("key", "default", "allowed"), rows))
        parts.append(f"`{cls.__name__}`: " + md(cls.__doc__))
    return "\n".join(parts)


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
        f"`{status.STATUS_FILE}`, `config.json`, `metrics.json`, `communication.json` and "
        "`rounds.json` ([Run status and results](../how-to/run-status.md)).\n",
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

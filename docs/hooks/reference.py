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
HOOKS = Path(__file__).resolve().parent
for _path in (HOOKS, ROOT):  # the helpers beside this file; the checkout's code first
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from reference_files import exit_codes_page, file_formats_page  # noqa: E402
from reference_text import code, inline, kebab, md, shown, table  # noqa: E402

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
        default = "the method's δ" if f.name == "delta" else shown(getattr(run, f.name))
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
            rows.append((f"`{kebab(key)}`", shown(default), method_range(m.name, kebab(key))))
        parts.append(table(("key", "default", "allowed"), rows))
        parts.append(f"`{cls.__name__}`: " + md(cls.__doc__))
    return "\n".join(parts)

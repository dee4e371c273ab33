"""MkDocs hook: the parts of the site written from the code, so they cannot drift from it.

A page asks for a part with a marker line, replaced before the page is rendered:

- `<!-- preflab:environment -->`: every option of every command that reads an environment
  variable, walked from the click commands themselves;
- `<!-- preflab:tables -->`: every table of the store, from the SQLAlchemy metadata, with the
  comments written beside each column in the models;
- `<!-- preflab:errors -->`: the domain errors of `preflab.errors`, with their docstrings;
- `<!-- preflab:include PATH -->`: a Markdown file from elsewhere in the repository (bench/README.md),
  less its title, its links outside the site turned into plain paths so the strict build still
  checks the rest.

The command reference itself is mkdocs-click's `::: mkdocs-click` block (docs/reference/commands.md).
tests/test_docs.py imports this module to walk the same commands.
"""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil
import posixpath
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- preflab:(\w+)(?: (\S+))? -->$", re.MULTILINE)
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def command_paths() -> Iterator[tuple[str, click.Command]]:
    """Every command under the root group, as (`preflab a b`, command), the lazy ones loaded."""
    from preflab.cli import cli

    def walk(command: click.Command, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
        yield ctx.command_path, command
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk(sub, click.Context(sub, info_name=name, parent=ctx))

    yield from walk(cli, click.Context(cli, info_name="preflab"))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def environment_table() -> str:
    rows: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    for path, command in command_paths():
        for param in command.params:
            if not isinstance(param, click.Option) or not param.envvar:
                continue
            names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
            for name in names:
                rows.setdefault(name, []).append(f"`{path} {max(param.opts, key=len)}`")
                helps.setdefault(name, param.help or "")
    lines = ["| variable | the option it stands for | what it sets |", "|---|---|---|"]
    for name in sorted(rows):
        lines.append(f"| `{name}` | {'<br>'.join(rows[name])} | {_cell(helps[name])} |")
    return "\n".join(lines)


def errors_table() -> str:
    """The domain errors of `preflab.errors`, each with its docstring, and the exit statuses it names."""
    import preflab.errors as errors

    lines = ["| error | what it means |", "|---|---|"]
    for name, value in vars(errors).items():
        if isinstance(value, type) and issubclass(value, errors.PreflabError) and value.__module__ == errors.__name__:
            lines.append(f"| `{name}` | {_cell(inspect.getdoc(value) or '')} |")
    statuses = [f"`{name}` = {value}" for name, value in vars(errors).items() if name.startswith("EXIT_")]
    return "\n".join(lines) + ("\n\nExit statuses it names: " + ", ".join(statuses) + "." if statuses else "")


def _column_notes(cls: type) -> dict[str, str]:
    """The comments written beside (or on the lines just above) each column of a model class."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    notes: dict[str, str] = {}
    pending: list[str] = []
    lines = source.splitlines()
    comments = {
        tok.start[0]: tok.string.lstrip("# ").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(comments.get(number, ""))
            continue
        column = re.match(r"\s+(\w+): Mapped\[", line)
        if column:
            said = [*pending, comments[number]] if number in comments else pending
            if said:
                notes[column.group(1)] = " ".join(said)
        pending = []
    return notes


def _type_name(column) -> str:
    try:
        return str(column.type)
    except Exception:  # a type with no default-dialect rendering: its class says enough
        return type(column.type).__name__


def tables_reference() -> str:
    import preflab.db as db

    for module in pkgutil.iter_modules(db.__path__):
        if not module.ispkg:
            importlib.import_module(f"preflab.db.{module.name}")
    from preflab.db.models import Base

    classes = {mapper.local_table.name: mapper.class_ for mapper in Base.registry.mappers}
    out: list[str] = []
    for table in sorted(Base.metadata.tables.values(), key=lambda t: t.name):
        cls = classes.get(table.name)
        notes = _column_notes(cls) if cls else {}
        keys = {prop.columns[0].name: prop.key for prop in cls.__mapper__.column_attrs} if cls else {}
        out.append(f"## `{table.name}`\n")
        doc = cls.__dict__.get("__doc__") if cls else None
        if doc:
            out.append(inspect.cleandoc(doc) + "\n")
        out.append("| column | type | null | key | notes |")
        out.append("|---|---|---|---|---|")
        for column in table.columns:
            key = []
            if column.primary_key:
                key.append("primary")
            key += [f"→ `{fk.column.table.name}.{fk.column.name}`" for fk in column.foreign_keys]
            if column.unique:
                key.append("unique")
            null = "yes" if column.nullable and not column.primary_key else ""
            note = notes.get(keys.get(column.name, column.name), "")
            out.append(f"| `{column.name}` | {_cell(_type_name(column))} | {null} | {' '.join(key)} | {_cell(note)} |")
        extras = [
            f"unique ({', '.join(c.name for c in con.columns)})"
            for con in table.constraints
            if con.__class__.__name__ == "UniqueConstraint" and len(con.columns) > 1
        ]
        extras += [
            f"index `{index.name}` ({', '.join(c.name for c in index.columns)})"
            for index in sorted(table.indexes, key=lambda i: i.name or "")
        ]
        if extras:
            out.append("\nAlso: " + "; ".join(extras) + ".")
        out.append("")
    return "\n".join(out)


def include(path: str, page_path: str) -> str:
    """A repository file inside a page; a link that leaves the site becomes the path it names."""
    text = (ROOT / path).read_text(encoding="utf-8")
    folder = posixpath.dirname(path)
    # The page has its own title: the file's, when it opens with one, would be a second.
    text = re.sub(r"\A\s*# [^\n]*\n", "", text)

    def relink(match: re.Match) -> str:
        bang, label, target = match.groups()
        if re.match(r"[a-z]+:|#", target):
            return match.group(0)
        file, _, anchor = target.partition("#")
        where = posixpath.normpath(posixpath.join(folder, file))
        if where.startswith("docs/") and where.endswith(".md"):
            rel = posixpath.relpath(where[len("docs/") :], posixpath.dirname(page_path) or ".")
            return f"{bang}[{label}]({rel}{'#' + anchor if anchor else ''})"
        return label if f"`{where}`" in label or label.strip("`") == where else f"{label} (`{where}`)"

    return LINK.sub(relink, text)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        kind, argument = match.groups()
        if kind == "environment":
            return environment_table()
        if kind == "tables":
            return tables_reference()
        if kind == "errors":
            return errors_table()
        if kind == "include" and argument:
            return include(argument, page.file.src_uri)
        raise ValueError(f"{page.file.src_uri}: unknown marker {match.group(0)}")

    return MARKER.sub(replace, markdown)

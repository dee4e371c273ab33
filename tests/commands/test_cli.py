"""The CLI shell: every command has help, and `preflab --help` stays light."""

import subprocess
import sys

import click
from click.testing import CliRunner

from preflab.cli import cli


def walk(group: click.Group, ctx: click.Context, path=()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from walk(command, click.Context(command, parent=ctx, info_name=name), (*path, name))


def test_every_command_has_help_text_and_an_example():
    ctx = click.Context(cli, info_name="preflab")
    missing = []
    for path, command in walk(cli, ctx):
        if not (command.help or "").strip():
            missing.append(" ".join(path))
        elif not isinstance(command, click.Group) and "Example:" not in command.help:
            missing.append(" ".join(path) + " (no example)")
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
    assert not missing, missing


def test_help_does_not_import_heavy_libraries():
    code = (
        "import sys; from click.testing import CliRunner; from preflab.cli import cli; "
        "r = CliRunner().invoke(cli, ['--help']); assert r.exit_code == 0, r.output; "
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_database_commands_do_not_import_torch(tmp_path, sample_rankings):
    code = (
        "import sys; from click.testing import CliRunner; from preflab.cli import cli\n"
        f"db = 'sqlite:///{tmp_path / 'x.db'}'\n"
        "for args in (['import', 'rankings', sys.argv[1]], ['pairs', 'build'], ['stats'], ['quarantine', 'list']):\n"
        "    r = CliRunner().invoke(cli, ['--database-url', db, *args]); assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(sample_rankings)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_unreachable_database_is_one_clear_sentence():
    result = CliRunner().invoke(cli, ["--database-url", "postgresql://nobody@127.0.0.1:1/none", "stats"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot open the database at postgresql")
    assert "Traceback" not in result.output


def test_root_summaries_are_each_commands_own_first_line():
    """`preflab --help` lists summaries without importing the groups; they must not drift."""
    from preflab.cli import COMMANDS, SUMMARIES

    assert set(SUMMARIES) == set(COMMANDS)
    ctx = click.Context(cli, info_name="preflab")
    drifted = {
        name: (SUMMARIES[name], first)
        for name in COMMANDS
        if SUMMARIES[name] != (first := cli.get_command(ctx, name).help.strip().splitlines()[0])
    }
    assert not drifted, drifted


def test_shared_options_are_declared_once():
    """Every `--json` and every `--project` is the same option, with the same help."""
    ctx = click.Context(cli, info_name="preflab")
    helps: dict[str, set[str]] = {"--json": set(), "--project": set()}
    for path, command in walk(cli, ctx):
        seen = [opt for param in command.params for opt in param.opts]
        assert len(seen) == len(set(seen)), (path, seen)
        for param in command.params:
            for opt in set(param.opts) & set(helps):
                helps[opt].add(param.help)
    assert len(helps["--json"]) == 1, helps["--json"]
    assert len(helps["--project"]) == 1, helps["--project"]


def test_self_reward_is_a_group_without_options_whose_default_command_is_run():
    """`preflab self-reward --iterations 3` keeps working: it is `self-reward run --iterations 3`."""
    ctx = click.Context(cli, info_name="preflab")
    group = cli.get_command(ctx, "self-reward")
    assert group.params == [] and sorted(group.commands) == ["report", "run"]

    runner = CliRunner()
    assert runner.invoke(cli, ["self-reward", "--iterations", "3", "--help"]).output.startswith(
        "Usage: cli self-reward run [OPTIONS]"
    )
    assert "Commands:" in runner.invoke(cli, ["self-reward", "--help"]).output  # --help first is the group's
    bare = runner.invoke(cli, ["self-reward"])
    assert bare.exit_code == 2 and "Error: give --iterations T, or a subcommand (report)" in bare.output
    typo = runner.invoke(cli, ["self-reward", "reprot"])
    assert typo.exit_code == 2 and "No such command 'reprot'" in typo.output


def test_a_command_ends_with_its_result_as_json_or_its_summary_then_its_notes():
    """`echo_result`, every command's tail: with --json one JSON document and nothing else (the summary is
    not even written); without, the summary on stdout (nothing when it is empty), then the notes on stderr."""
    import json

    from preflab.commands.options import echo_result, json_option

    written = []

    @click.command()
    @click.option("--empty", is_flag=True)
    @json_option
    def command(empty, as_json):
        def text():
            written.append(1)
            return "" if empty else "built 3 comparisons\nleft out ann-1: too fast"

        echo_result(as_json, {"pairs": 3}, text, ["see them with: preflab quarantine list"])

    result = CliRunner().invoke(command, ["--json"])
    assert json.loads(result.stdout) == {"pairs": 3} and result.stderr == "" and not written
    result = CliRunner().invoke(command, [])
    assert result.stdout == "built 3 comparisons\nleft out ann-1: too fast\n"
    assert result.stderr == "see them with: preflab quarantine list\n"
    assert CliRunner().invoke(command, ["--empty"]).stdout == ""

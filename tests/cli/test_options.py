"""What every subcommand shares: ``--log-level`` (a wrong level is a usage error, exit 2,
never a traceback) and a description in its ``--help``."""

from __future__ import annotations

import argparse

import pytest

from operators.app.cli import build_parser, main


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


COMMANDS = sorted(_subcommands())


def test_there_are_seven_subcommands() -> None:
    assert COMMANDS == ["copy", "demo", "init", "inspect", "run", "sandbox", "switch"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_a_description_and_log_level(command: str) -> None:
    sub = _subcommands()[command]
    assert sub.description and len(sub.description) > 40
    help_text = sub.format_help()
    assert "--log-level LEVEL" in help_text and "DEBUG, INFO, WARNING" in help_text


ARGS = {
    "run": ["run", "x.toml"],
    "copy": ["copy", "a", "b"],
    "switch": ["switch", "x.toml", "d"],
    "inspect": ["inspect", "d"],
    "init": ["init"],
    "demo": ["demo"],
    "sandbox": ["sandbox"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_log_level_is_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*ARGS[command], "--log-level", "verbose"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --log-level: invalid level 'verbose'" in err
    assert "Traceback" not in err


def test_a_level_in_any_case_is_taken() -> None:
    args = build_parser().parse_args(["inspect", "d", "--log-level", "debug"])
    assert args.log_level == "DEBUG"


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_lists_the_exit_codes_of_the_one_table(command: str | None) -> None:
    from operators.app.exit_codes import EXIT_CODES

    parser = build_parser() if command is None else _subcommands()[command]
    text = " ".join(parser.format_help().split())
    assert "exit codes:" in text
    for row in EXIT_CODES:
        if command is None or not row.commands or command in row.commands:
            assert f" {row.codes} {row.meaning.replace('`', '')[:40]}" in text
        else:
            assert f" {row.codes} " not in text.split("exit codes:")[1]

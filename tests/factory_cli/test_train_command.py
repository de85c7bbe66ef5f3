"""``factory train``'s own part, without torchrun: its help, the options it refuses, and how it
runs the launcher (``launch``) with a stand-in for torchrun, a small Python program."""

from __future__ import annotations

import os
import signal
import sys
import textwrap

import pytest

from factory_cli.main import main
from factory_cli.train import launch


def test_the_help_says_that_set_values_are_toml_with_an_example(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help at the terminal's width
    assert "VALUE read as TOML, e.g. --set optim.lr=0.003" in shown
    assert "--set 'run.dir=\"runs/a\"'" in shown and "--catalog" not in shown


@pytest.mark.parametrize("given", [["--catalog", "prod"], ["--catalog=prod"]])
def test_a_catalog_is_refused_not_ignored(tmp_path, capsys, given):
    """Training opens no catalog by name (lineage reads the one the manifest was pinned in): a
    --catalog would change nothing, so it is refused with the usage, before the config is read."""
    with pytest.raises(SystemExit) as done:
        main(["train", "--config", str(tmp_path / "absent.toml"), *given])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "factory train: error: --catalog does not apply to factory train: it reads the data files" in err
    assert "choose the catalog when pinning: factory mix pin SPEC --catalog NAME" in err
    assert "absent.toml" not in err


# Stands in for torchrun (trainer.launch): says whether it was asked to be quiet, then ends ("ends")
# or trains until stopped. SIGINT ends it as trainer.launch ends, with its one line and 128 + 2
# ("says-it"), or kills it before it can say anything ("dies", as a second Ctrl-C would).
FAKE_TORCHRUN = textwrap.dedent(
    """
    import os, signal, sys, time
    def stopped(signum, frame):
        if sys.argv[1] == "says-it":
            print("training stopped: the launcher got SIGINT; resume with --resume", file=sys.stderr, flush=True)
            sys.exit(130)
        os.kill(os.getpid(), signal.SIGKILL)
    signal.signal(signal.SIGINT, stopped)
    print("quiet=" + os.environ.get("FACTORY_QUIET", "unset"), file=sys.stderr, flush=True)
    if sys.argv[1] != "ends":
        time.sleep(60)
    """
)


@pytest.mark.parametrize("quiet", [True, False])
def test_quiet_reaches_the_ranks_as_factory_quiet_and_only_with_q(monkeypatch, capsys, quiet):
    monkeypatch.setenv("FACTORY_QUIET", "1")  # left in the environment from elsewhere: -q alone decides
    assert launch([sys.executable, "-c", FAKE_TORCHRUN, "ends"], 1, quiet=quiet) == 0
    assert capsys.readouterr().err == f"quiet={'1' if quiet else 'unset'}\n"


class _CtrlCOnFirstLine:
    """``sys.stderr`` for ``launch``: writes go to ``lines``, and the first line passed on (the
    fake's, so its handlers are up, and launch's too) is followed by Ctrl-C to this process, the
    SIGINT a terminal sends its foreground job."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.append(text.rstrip("\n"))
        if len(self.lines) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    def flush(self) -> None:
        pass


def test_ctrl_c_is_said_once_by_the_launchers_line(monkeypatch):
    """``factory train`` printed that line, then ``interrupted`` (factory_cli/main.py) under it."""
    err = _CtrlCOnFirstLine()
    monkeypatch.setattr(sys, "stderr", err)
    try:
        code = launch([sys.executable, "-c", FAKE_TORCHRUN, "says-it"], 1)
    except KeyboardInterrupt:  # caught here, not by pytest, which would end the session
        pytest.fail("KeyboardInterrupt: factory train would print `interrupted` under the launcher's line")
    assert code == 130
    assert err.lines == ["quiet=unset", "training stopped: the launcher got SIGINT; resume with --resume"]


def test_ctrl_c_that_torchrun_could_not_say_is_said_as_every_command_says_it(monkeypatch):
    err = _CtrlCOnFirstLine()
    monkeypatch.setattr(sys, "stderr", err)
    with pytest.raises(KeyboardInterrupt):  # the command's own `interrupted`, exit 130 (factory_cli/main.py)
        launch([sys.executable, "-c", FAKE_TORCHRUN, "dies"], 1)
    assert err.lines == ["quiet=unset"]


def test_export_refuses_a_catalog_it_would_ignore(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["export", str(tmp_path / "run"), "--output", str(tmp_path / "out"), "--catalog", "prod"])
    assert done.value.code == 2
    assert "--catalog does not apply to factory export: it reads only the checkpoint folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "quiet"),
    [
        (["rl", "train", "-q", "--config", "c.toml"], True),
        (["rl", "-q", "train", "--config", "c.toml"], True),
        (["rl", "train", "--config", "c.toml"], False),
        (["rl", "build", "--quiet"], True),
    ],
)
def test_quiet_is_taken_after_an_rl_subcommand_as_after_any_command(argv, quiet):
    """`factory rl train -q` was refused (`unrecognized arguments: -q`): only `factory rl -q train` took it."""
    from factory_cli.main import build_parser

    assert build_parser("rl").parse_args(argv).quiet is quiet

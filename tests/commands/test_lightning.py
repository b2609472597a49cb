"""``nerf-lightning fit|validate|test|predict`` builds the parser of the subcommand it runs, and only that
one; the top-level help and a mistyped subcommand still see every subcommand."""

from __future__ import annotations

from pathlib import Path

import pytest

from nerf_lightning.cli import main
from nerf_lightning.commands.lightning import SUBCOMMANDS, NerfCLI, requested_subcommand
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import short_run_args


@pytest.mark.parametrize(("args", "expected"), [
    (["fit", "--trainer.max_steps", "3"], "fit"),
    (["test", "--ckpt_path", "run"], "test"),
    (["predict"], "predict"),
    (["--config", "fit.yaml", "fit"], None),  # an option of the main parser first: it may name another
    (["fitt"], None),
    (["--help"], None),
    ([], None),
])
def test_the_requested_subcommand_is_the_first_argument_when_it_names_one(
        args: list[str], expected: str | None) -> None:
    assert requested_subcommand(args) == expected


@pytest.mark.slow  # builds a LightningCLI
def test_a_subcommand_builds_only_its_own_parser(tiny_scene: Path, tmp_path: Path) -> None:
    cli = NerfCLI(NerfModule, NerfDataModule, args=["validate", *short_run_args(tiny_scene, tmp_path)])
    assert list(cli.parser._subcommands_action.choices) == ["validate"]  # argparse's map of choices
    assert cli.trainer.state.fn == "validate" and cli.trainer.state.finished


@pytest.mark.slow  # LightningCLI's parser refuses it
def test_a_mistyped_subcommand_is_refused_naming_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["fitt"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "'fitt'" in err and all(f"'{name}'" in err for name in SUBCOMMANDS), err

"""A slip on the command line or in a config file is one line naming the key, where it came from and
what was probably meant: the pure functions on jsonargparse's messages, then the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from nerf_lightning.cli import main
from nerf_lightning.config.slips import explain, key_line, nearest, unknown_keys, yaml_problem

KNOWN = ["trainer.max_time", "trainer.max_steps", "data.downscale", "model.learning_rate"]
SAMPLERS = ["Uniform", "Proposal", "OccupancyGrid", "Hierarchical", "Disparity"]
SAMPLER_MESSAGE = ('Parser key "model.sampler":\n  - Does not validate against any of the Union subtypes\n'
                   "  Given value type: <class 'str'>\n  Given value: Proposl\n")


def test_nearest_finds_a_transposition_and_nothing_for_a_stranger() -> None:
    assert nearest("trainer.max_tiem", KNOWN) == "trainer.max_time"
    assert nearest("zzz.qqq", KNOWN) is None


def test_unknown_keys_of_the_command_line_and_of_a_config_file() -> None:
    assert unknown_keys("unrecognized arguments: --trainer.max_tiem 5 --data.dowscale=4") == [
        "trainer.max_tiem", "data.dowscale"]
    assert unknown_keys("Subcommand 'fit' does not accept option 'trainer.max_tiem'") == ["trainer.max_tiem"]
    assert unknown_keys('Parser key "model.sampler": invalid') == []


def test_key_line_follows_the_dotted_key_and_optionally_its_value(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("trainer:\n  max_steps: 3\n  max_tiem: 5\nmodel:\n  sampler:\n"
                      "    class_path: nerf_lightning.samplers.Proposl\n")
    assert key_line(config, "trainer.max_tiem") == 3
    assert key_line(config, "trainer.nothing") is None and key_line(config, "max_tiem") is None
    assert key_line(config, "model.sampler", "Proposl") == 5
    assert key_line(config, "model.sampler", "Uniform") is None
    (tmp_path / "broken.yaml").write_text("trainer: [unclosed\n")
    assert key_line(tmp_path / "broken.yaml", "trainer") is None


def test_explain_names_the_file_and_line_of_a_config_key(tmp_path: Path) -> None:
    config = tmp_path / "typo.yaml"
    config.write_text("trainer:\n  max_tiem: 5\n")
    message = "Subcommand 'fit' does not accept option 'trainer.max_tiem'"
    assert explain(message, KNOWN, [config]) == (
        f"unknown key trainer.max_tiem (in {config}, line 2); did you mean trainer.max_time?")
    assert explain(message, KNOWN) == "unknown option --trainer.max_tiem; did you mean --trainer.max_time?"


def test_explain_lists_the_installed_samplers_and_leaves_other_errors_alone() -> None:
    assert explain(SAMPLER_MESSAGE, KNOWN, samplers=SAMPLERS) == (
        "model.sampler: 'Proposl' is not an installed sampler; installed: Disparity, Hierarchical, "
        "OccupancyGrid, Proposal, Uniform; did you mean Proposal?")
    other = 'Parser key "trainer.max_steps": Expected a <class \'int\'>'
    assert explain(other, KNOWN, samplers=SAMPLERS) is None


def test_explain_names_a_class_that_cannot_be_imported_with_its_key_and_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  max_steps: 3\n  callbacks:\n    - class_path: tools.clock.Clock\n")
    message = ('Parser key "trainer.callbacks":\n  Does not validate against any of the Union subtypes\n'
               "  Errors:\n    - Problem with given class_path 'tools.clock.Clock':\n"
               "        No module named 'tools'\n    - Not a valid subclass of Callback\n")
    assert explain(message, KNOWN, [config]) == (
        f"trainer.callbacks (in {config}, line 3): tools.clock.Clock cannot be imported (No module named "
        "'tools'); expected a class of an installed package")
    twice = message + "  - Problem with given class_path 'tools.clock.Clock':\n    No module named 'tools'\n"
    assert explain(twice, KNOWN, [config]) == explain(message, KNOWN, [config])
    # an importable class with a bad init argument is worded alike by jsonargparse: not an import failure
    bad_argument = message.replace("No module named 'tools'", 'Parser key "every_n_train_steps":')
    assert explain(bad_argument, KNOWN, [config]) is None


def test_a_config_that_is_not_yaml_is_named_with_its_problem_and_line(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("trainer:\n  max_steps: 3\n")
    bad.write_text("trainer:\n  max_time: [5\n")
    assert yaml_problem(good) is None
    line = yaml_problem(bad)
    assert line is not None and line.startswith(f"{bad}: not valid YAML (") and "line 3, column 1)" in line
    message = 'Problems parsing config: while parsing a flow sequence\n  in "<unicode string>", line 2'
    assert explain(message, KNOWN, [good, bad]) == line


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "expected"), [
    (["--trainer.max_tiem", "5"],
     "nerf-lightning fit: unknown option --trainer.max_tiem; did you mean --trainer.max_time? "
     "(options: nerf-lightning fit --help)"),
    (["--model.sampler", "Proposl"],
     "nerf-lightning fit: model.sampler: 'Proposl' is not an installed sampler; installed: "),
    (["--config", "TYPO"],
     "nerf-lightning fit: unknown key trainer.max_tiem (in TYPO, line 2); did you mean trainer.max_time?"),
    (["--config", "BROKEN"], "nerf-lightning fit: BROKEN: not valid YAML ("),
    (["--config", "UNIMPORTABLE"], "nerf-lightning fit: trainer.callbacks (in UNIMPORTABLE, line 2): "
     "no_such_package.Clock cannot be imported (No module named 'no_such_package'); expected a class"),
])
def test_the_cli_says_one_line_and_exits_2(extra: list[str], expected: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("trainer:\n  max_tiem: 5\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  max_time: [5\n")
    unimportable = tmp_path / "unimportable.yaml"
    unimportable.write_text("trainer:\n  callbacks:\n    - class_path: no_such_package.Clock\n")
    monkeypatch.chdir(tmp_path)  # nothing may be written here
    files = {"TYPO": str(typo), "BROKEN": str(broken), "UNIMPORTABLE": str(unimportable)}
    extra = [files.get(arg, arg) for arg in extra]
    with pytest.raises(SystemExit) as stopped:
        main(["fit", "--config", "demo", *extra])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    for name, path in files.items():
        expected = expected.replace(name, path)
    assert len(err) == 1 and err[0].startswith(expected), err
    assert sorted(tmp_path.iterdir()) == sorted([typo, broken, unimportable])

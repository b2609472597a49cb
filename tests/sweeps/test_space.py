"""The search space: parameters checked with one line naming ``space.KEY``, a trial's config written from the
base config by the key rules, the grid, and the trials' seeds."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from nerf_lightning.sweeps.runner import _sampler
from nerf_lightning.sweeps.space import SpaceError, parse_param, parse_space, trial_seed, with_values
from nerf_lightning.sweeps.spec import SweepSpecError, check

REPO = Path(__file__).resolve().parents[2]
DEMO = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())


def test_keys_reach_init_args_list_items_by_class_and_replace_components() -> None:
    trial = with_values(DEMO, {"model.learning_rate": 0.02,
                               "model.field.max_resolution": 128,
                               "trainer.callbacks.SampleBudget.target_samples": 8192,
                               "model.sampler.steps_per_diagonal": 512})
    assert trial["model"]["learning_rate"] == 0.02
    assert trial["model"]["field"] == {"class_path": "nerf_lightning.fields.HashGridField",
                                       "init_args": {"max_resolution": 128}}
    budget = [c for c in trial["trainer"]["callbacks"] if c["class_path"].endswith(".SampleBudget")]
    assert budget[0]["init_args"] == {"target_samples": 8192}
    assert trial["model"]["sampler"]["init_args"]["steps_per_diagonal"] == 512
    assert trial["model"]["sampler"]["init_args"]["early_decay_steps"] == 512  # the rest kept
    assert DEMO["model"]["learning_rate"] == 0.01  # the base is not touched
    swapped = with_values(DEMO, {"model.sampler": "Proposal"})
    assert swapped["model"]["sampler"] == {"class_path": "Proposal"}  # not OccupancyGrid's arguments


@pytest.mark.parametrize(("values", "message"), [
    ({"trainer.callbacks.Missing.x": 1}, "no component 'Missing' in trainer.callbacks of the base config "
                                         "(it holds: Telemetry, SampleBudget, RunSummary, TimedValidation)"),
    ({"model.learning_rate.x": 1}, "space.model.learning_rate.x: model.learning_rate is not a mapping"),
    ({"trainer.callbacks": 3}, "space.trainer.callbacks: a list in the base config; name one of its"),
])
def test_keys_that_do_not_fit_the_base_config_are_one_line(values: dict, message: str) -> None:
    with pytest.raises(SpaceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        with_values(DEMO, values)


@pytest.mark.parametrize(("spec", "message"), [
    ({"type": "cat", "choices": [1]}, "space.k.type: expected one of categorical, int, float, log-float"),
    ({"type": "categorical", "choices": []}, "space.k.choices: expected a non-empty list"),
    ({"type": "categorical", "choices": [{"a": 1}]}, "space.k.choices: expected strings, numbers"),
    ({"type": "int", "low": 1.5, "high": 3}, "space.k: expected whole numbers for low and high"),
    ({"type": "float", "low": 2.0, "high": 1.0}, "space.k: expected low <= high"),
    ({"type": "log-float", "low": 0.0, "high": 1.0}, "space.k.low: a log-float parameter needs low > 0"),
    ({"type": "float", "low": 0.0, "high": 1.0, "choices": [1]}, "space.k: unknown field"),
])
def test_a_bad_parameter_is_one_line_naming_it(spec: dict, message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        parse_param("k", spec)


def test_grid_values_cover_each_range_by_its_step() -> None:
    params = parse_space({"a": {"type": "int", "low": 2, "high": 8, "step": 3},
                          "b": {"type": "float", "low": 0.5, "high": 1.0, "step": 0.25},
                          "c": {"type": "categorical", "choices": ["x", None]}})
    assert [p.grid_values() for p in params] == [[2, 5, 8], [0.5, 0.75, 1.0], ["x", None]]
    with pytest.raises(SpaceError, match=r"space\.d: a grid search needs the values of every parameter"):
        parse_param("d", {"type": "log-float", "low": 1e-3, "high": 1e-1}).grid_values()


def _options(**changes: object) -> dict:
    learning_rate = {"type": "log-float", "low": 1e-3, "high": 1e-1}
    options = {"base": "demo", "space": {"model.learning_rate": learning_rate}, "search": "tpe", "trials": 4,
               "max_time": "00:00:00:30", "objective": "test_psnr", "seed": 0}
    return {**options, **changes}


@pytest.mark.parametrize(("changes", "message"), [
    ({"base": "nonexistent"}, "s.yaml: base: nonexistent: no such file, and no config of that name ships"),
    ({"max_time": "30s"}, "max_time: expected DD:HH:MM:SS"),
    ({"trials": 0}, "trials: expected a positive whole number"),
    ({"search": "grid"}, "space.model.learning_rate: a grid search needs the values"),
    ({"study": "a b"}, "study: expected letters, digits"),
    ({"pruner": "medain"}, "s.yaml: pruner: expected none, median or hyperband, got 'medain'"),
    ({"prune_every_s": 0}, "prune_every_s: expected a positive number of seconds, got 0"),
    ({"prune_startup_trials": -1}, "prune_startup_trials: expected a whole number >= 0, got -1"),
])
def test_a_bad_sweep_file_is_one_line_naming_the_file_and_field(tmp_path: Path, changes: dict,
                                                                message: str) -> None:
    with pytest.raises(SweepSpecError, match=message):
        check(_options(**changes), tmp_path / "s.yaml")


def test_a_sweep_file_names_its_study_folder_and_database(tmp_path: Path) -> None:
    spec = check(_options(), tmp_path / "lr-sweep.yaml")
    assert spec.study == "lr-sweep" and spec.out == Path("sweeps/lr-sweep")
    assert spec.storage == f"sqlite:///{(Path('sweeps/lr-sweep') / 'study.db').resolve()}"
    assert spec.base_config == REPO / "configs" / "demo.yaml"  # a shipped name


@pytest.mark.parametrize("search", ["random", "tpe", "grid"])
def test_the_same_seed_asks_the_same_trials_and_another_seed_others(tmp_path: Path, search: str) -> None:
    space = {"model.learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "step": 0.001},
             "model.sampler": {"type": "categorical", "choices": ["OccupancyGrid", "Proposal", "Uniform"]}}

    def asked(seed: int) -> list[dict]:
        spec = check(_options(space=space, search=search, seed=seed), tmp_path / "s.yaml")
        study = optuna.create_study(sampler=_sampler(optuna, spec), direction="maximize")
        found = []
        for number in range(6):
            trial = study.ask()
            found.append({p.key: p.suggest(trial) for p in spec.params})
            study.tell(trial, float(number % 3))  # TPE needs told values to go on from
        return found

    assert asked(0) == asked(0)
    assert asked(0) != asked(1)


def test_trial_seeds_repeat_and_differ_between_trials_and_studies() -> None:
    seeds = [trial_seed(0, "s", n) for n in range(100)]
    assert seeds == [trial_seed(0, "s", n) for n in range(100)] and len(set(seeds)) == 100
    assert trial_seed(0, "other", 0) != seeds[0] and trial_seed(1, "s", 0) != seeds[0]
    assert all(0 <= s < 2**31 for s in seeds)

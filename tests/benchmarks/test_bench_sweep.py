"""The sweep benchmark's report, from a result as ``benchmarks.sweep`` writes it."""

from __future__ import annotations

from benchmarks.sweep import markdown


def _trial(number: int, sampler: str, value: float | None, state: str = "complete") -> dict:
    took = None if value is None else 52.0 + number
    params = {"model.sampler": sampler, "trainer.callbacks.SampleBudget.target_samples": 8192}
    return {"trial": number, "state": state, "params": params,
            "value": value, "train_s": None if value is None else 30.0, "trial_s": took,
            "overhead_s": None if took is None else took - 30.0}


def test_report_has_every_trial_the_overheads_and_the_best() -> None:
    result = {"workers": 2, "storage": "postgresql", "wall_s": 201.4, "max_time": "00:00:00:30",
              "complete": 2, "trials": [_trial(0, "Uniform", 27.5), _trial(1, "Proposal", 29.25),
                         _trial(2, "OccupancyGrid", None, "fail")],
              "best": _trial(1, "Proposal", 29.25)}
    text = markdown(result)
    assert "2 worker(s) of one thread each, storage postgresql: 2 trials complete in 201 s wall time" in text
    assert ("| trial | state | model.sampler | trainer.callbacks.SampleBudget.target_samples | test PSNR "
            "| train s | trial s | overhead s |") in text
    assert "| 1 | complete | Proposal | 8192 | 29.25 | 30.0 | 53.0 | 23.0 |" in text
    assert "| 2 | fail | OccupancyGrid | 8192 | - | - | - | - |" in text
    assert "mean 22.5 s, min 22.0, max 23.0." in text
    assert ("Best: trial 1 (model.sampler Proposal, trainer.callbacks.SampleBudget.target_samples 8192), "
            "test PSNR 29.25 dB.") in text

"""The training loader resumes mid-epoch: its state is the epoch's batches handed out, and Lightning counts
it as resumable (no "not resumable" warning on resume)."""

from __future__ import annotations

from lightning.fabric.utilities.types import _Stateful

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.training_steps import TrainingSteps


def test_the_training_loader_resumes_where_its_state_says() -> None:
    loader = NerfDataModule(steps_per_epoch=5).train_dataloader()
    assert isinstance(loader, TrainingSteps) and isinstance(loader, _Stateful)  # Lightning's test
    epoch = iter(loader)
    assert [next(epoch), next(epoch)] == [0, 1] and loader.state_dict() == {"epoch_position": 2}

    resumed = TrainingSteps(range(5))
    resumed.load_state_dict(loader.state_dict())
    assert list(resumed) == [2, 3, 4] and resumed.state_dict() == {"epoch_position": 5}
    assert list(resumed) == [0, 1, 2, 3, 4]  # the next epoch is whole
    resumed.load_state_dict({"epoch_position": 5})  # saved at the end of an epoch: the next starts at 0
    assert list(resumed) == [0, 1, 2, 3, 4]

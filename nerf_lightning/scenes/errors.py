"""The one error type raised for problems found in a dataset."""

from __future__ import annotations

from pathlib import Path


class DatasetError(ValueError):
    """A dataset cannot be used as it is.

    The message is one line: the file, the frame (when the problem is in one frame),
    the field, and what was expected, e.g.
    ``transforms_train.json: frame 3: field 'transform_matrix': expected a 4x4 matrix of finite numbers``.
    """

    def __init__(self, file: str | Path, message: str, *, frame: int | str | None = None,
                 field: str | None = None) -> None:
        self.file = str(file)
        self.frame = frame
        self.field = field
        self.detail = message
        parts = [self.file]
        if frame is not None:
            parts.append(f"frame {frame}")
        if field is not None:
            parts.append(f"field '{field}'")
        parts.append(message)
        super().__init__(": ".join(parts).replace("\n", " "))


class DatasetValidationError(DatasetError):
    """Every problem found in a dataset at once (raised by ``validate.require_valid_dataset``).

    Attributes:
        problems: the problems, each a one-line :class:`DatasetError` with the loader's message.
        command: the ``nerf-lightning data validate ...`` command that lists them again.

    The message names the folder, the number of problems, the first one and :attr:`command`.
    """

    def __init__(self, root: str | Path, problems: list[DatasetError], command: str) -> None:
        if not problems:
            raise ValueError("a DatasetValidationError needs at least one problem")
        self.problems = list(problems)
        self.command = command
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(root, f"{count}, the first: {problems[0]}; list them all with '{command}'")

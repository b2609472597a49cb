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

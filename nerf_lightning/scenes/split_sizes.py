"""Image sizes within one split of a Blender scene: every image must have the split's aspect ratio.

A Blender split has one ``camera_angle_x`` for all its images; the loader derives each image's focal
length from that angle and the image's own width (``fx = fy = 0.5 * W / tan(angle / 2)``, square
pixels), so the vertical field of view follows from the aspect ratio. An image whose aspect ratio
differs from the others' cannot show the scene through the same camera: its pixels cannot match the
split's intrinsics, and training on it silently fits a wrong camera. Such an image is a problem. An
image of another size with the same aspect ratio (e.g. a downscaled copy) is consistent with the angle
and only a warning.

The split's size is the majority's: the size with the most images of its aspect ratio (ties: the one
met first in file order), so one odd image is the one named, even when it comes first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.problems import Problems

Size = tuple[int, int]
"""``(width, height)`` in pixels."""
_MAX_NAMES_IN_WARNING = 10


def same_aspect(size: Size, reference: Size) -> bool:
    """Whether one of the two sizes is a resize of the other, both sides rounded the same way.

    That is: for some scale ``s`` the rounding errors ``e_w = w - s * w0`` and ``e_h = h - s * h0`` are
    both under a pixel and differ by under a pixel (floor, round or ceil applied to both sides), with
    ``(w, h)`` and ``(w0, h0)`` either way round. A tolerance in pixels, not a ratio: rounding moves a
    side by under a pixel whatever the image size, while a ratio tolerance would accept tens of pixels
    on large images. Exact fractions: the bounds are often met exactly.
    """

    def resized(a: Size, b: Size) -> bool:  # is a a rounded resize of b?
        (w, h), (w0, h0) = a, b
        low = max(Fraction(w - 1, w0), Fraction(h - 1, h0))
        high = min(Fraction(w + 1, w0), Fraction(h + 1, h0))
        if w0 == h0:
            return abs(w - h) < 1 and low < high
        ends = sorted((Fraction(w - h - 1, w0 - h0), Fraction(w - h + 1, w0 - h0)))
        return max(low, ends[0]) < min(high, ends[1])

    return resized(size, reference) or resized(reference, size)


@dataclass(frozen=True)
class SplitSize:
    """The size a split's images should have.

    Attributes:
        size: ``(width, height)``.
        exact: how many images have exactly that size; ``aspect``: how many have its aspect ratio.
        total: the images compared.
        example: the first image of exactly that size.
    """

    size: Size
    exact: int
    aspect: int
    total: int
    example: str

    def describe(self) -> str:
        width, height = self.size
        share = f"{self.exact} of {self.total}, e.g. '{self.example}'"
        if self.aspect != self.exact:
            share += f"; {self.aspect} with its aspect ratio"
        return f"the split's images are {width}x{height} ({share})"


def split_size(names: Mapping[int, str], sizes: Mapping[int, Size]) -> SplitSize:
    """The majority size of the frames ``sizes`` (frame -> size, in file order); ``names``: frame ->
    image name."""
    candidates = list(dict.fromkeys(sizes.values()))  # distinct sizes, first seen first
    counts = {c: sum(same_aspect(s, c) for s in sizes.values()) for c in candidates}
    exact = {c: sum(s == c for s in sizes.values()) for c in candidates}
    best = max(candidates, key=lambda c: (counts[c], exact[c]))  # max keeps the first of equal keys
    example = next(names[i] for i, s in sizes.items() if s == best)
    return SplitSize(best, exact[best], counts[best], len(sizes), example)


def check_aspect(source: Path, index: int, name: str, size: Size, expected: SplitSize) -> Size:
    """Frame ``index``'s image (``name``, ``size``) has the aspect ratio of the split's ``expected``."""
    if not same_aspect(size, expected.size):
        width, height = size
        ew, eh = expected.size
        raise DatasetError(
            source,
            f"image '{name}' is {width}x{height} pixels but {expected.describe()}; expected the aspect "
            f"ratio of {ew}x{eh} (that size or a resize of it): one camera_angle_x gives every image of "
            "the split the same field of view",
            frame=index,
            field="file_path",
        )
    return size


def check_split_sizes(
    source: Path,
    names: Mapping[int, str],
    sizes: Mapping[int, Size],
    problems: Problems,
    *,
    stacklevel: int = 2,
) -> list[int]:
    """Every frame of ``sizes`` (frame -> decoded size, file order) has the split's aspect ratio.

    Problems go to ``problems`` (strict: the first in file order raises). Frames of the same aspect
    ratio but another size are warned about (strict: one ``UserWarning``; ``stacklevel`` counts from
    the caller). Returns the frames without a problem.
    """
    if not sizes:
        return []
    expected = split_size(names, sizes)
    good = [
        i for i, size in sizes.items() if problems.check(check_aspect, source, i, names[i], size, expected)
    ]
    other = [i for i in good if sizes[i] != expected.size]
    if other:
        shown = [f"'{names[i]}' {sizes[i][0]}x{sizes[i][1]}" for i in other[:_MAX_NAMES_IN_WARNING]]
        preview = ", ".join(shown) + (", ..." if len(other) > _MAX_NAMES_IN_WARNING else "")
        problems.warn(
            [
                DatasetError(
                    source,
                    f"image '{names[i]}' is {sizes[i][0]}x{sizes[i][1]} pixels but {expected.describe()}; "
                    "same aspect ratio, so its focal length is scaled to its width",
                    frame=i,
                    field="file_path",
                )
                for i in other
            ],
            f"{source}: {len(other)} image(s) of another size than the split's {expected.size[0]}x"
            f"{expected.size[1]}, with its aspect ratio (focal lengths are scaled to each width): {preview}",
            stacklevel=stacklevel + 1,
        )
    return good

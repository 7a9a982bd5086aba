"""Which form a 3x3 stride-1 layer takes: Winograd F(4,3), F(2,3) or direct, by its
output tiles, and when two forms are contested and both tuned. Pure: no TVM."""

from __future__ import annotations

from typing import NamedTuple

KERNEL_SIZE = 3
# The Winograd forms by tile size m, largest first (F(4,3) saves most multiplications,
# F(2,3) keeps weights smaller), each with the output tiles it needs to be used at all.
# A transformed weight is read once per tile and U is (m+2)^2/9 times the direct weights:
# with few tiles a layer streams weights instead of computing. Hence F(4,3) from 16
# tiles: ResNet-18's 512-channel 7x7 layers (4 tiles) run far above their tuned estimate
# inside the model in that form, its 14x14 ones (16 tiles) close to theirs. And F(2,3)
# from 32: at 16 tiles (those 7x7 layers) the direct convolution beats it in every search
# that tunes both, so tuning that contest only spends trials on a form never built
# (BENCHMARKS.md).
MIN_TILES = {4: 16, 2: 32}
TILE_SIZES = tuple(MIN_TILES)
# Below CONTESTED_FACTOR times its form's MIN_TILES a layer may stream its weights, and
# whether the next smaller form (fewer weight bytes, more multiplications) is faster in
# the model is measured, not guessed: both forms are tuned (:mod:`simpletvm.compiler.conv_forms`).
CONTESTED_FACTOR = 2


class ConvSignature(NamedTuple):
    """What makes two convolutions the same layer to the rewrite: the NHWC input shape,
    the output channels and the padding (top, left, bottom, right)."""

    data_shape: tuple[int, ...]
    out_channels: int
    padding: tuple[int, ...]

    def __str__(self) -> str:
        _, h, w, c = self.data_shape
        return f"3x3 {c}->{self.out_channels} at {h}x{w}"


def tile_count(out_h: int, out_w: int, tile_size: int) -> int:
    return -(-out_h // tile_size) * -(-out_w // tile_size)


def tile_size_for(out_h: int, out_w: int) -> int | None:
    """The Winograd tile a layer of this output size gets: the largest of TILE_SIZES
    that still gives its MIN_TILES tiles to reuse each weight over, or None (direct)."""
    for m in TILE_SIZES:
        if tile_count(out_h, out_w, m) >= MIN_TILES[m]:
            return m
    return None


def forms_for(out_h: int, out_w: int) -> tuple[int | None, ...]:
    """The forms (tile sizes, None: direct) a layer of this output size is tuned in:
    :func:`tile_size_for`'s first, then, when that gives fewer than CONTESTED_FACTOR
    times its MIN_TILES tiles, the next smaller form."""
    first = tile_size_for(out_h, out_w)
    if first is None or (tile_count(out_h, out_w, first) >= CONTESTED_FACTOR * MIN_TILES[first]):
        return (first,)
    smaller = [m for m in TILE_SIZES if m < first]
    return (first, smaller[0] if smaller else None)


def second_form_built(first_s: float | None, second_s: float | None) -> bool:
    """Whether a layer tuned in two forms is built in its second (alternative) one: only
    when both forms' tasks are all measured (not None) and the second's are faster. The
    build, the tuning plan's estimate and the tuning curve all follow this one rule."""
    return first_s is not None and second_s is not None and second_s < first_s

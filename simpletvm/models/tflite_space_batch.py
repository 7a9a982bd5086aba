"""TFLite's SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND as Relax reshapes and transposes.

The TFLite converter writes a dilated convolution with SAME padding as a convolution
between the two (each ``block``-th pixel of every phase becomes its own image). TVM's
frontend emits them as a call of a TOPI function by name, which no runtime has, at the
batch the flatbuffer lists; these are the same rearrangements in operators Relax lowers,
at the fixed input shape. ``shape`` is the input's (batch, spatial..., rest...).
"""

from __future__ import annotations


def space_to_batch(data, shape: tuple[int, ...], block: list[int], paddings: list[list[int]]):
    """``data`` padded, each spatial axis split into ``(size / block, block)``, the block
    offsets moved before the batch and merged into it."""
    from tvm import relax

    spatial = len(block)
    pad = [0, 0]
    for before, after in paddings:
        pad += [before, after]
    pad += [0, 0] * (len(shape) - 1 - spatial)
    padded = relax.op.nn.pad(data, pad) if any(pad) else data
    sizes = [size + before + after for size, (before, after) in zip(shape[1:], paddings)]
    split = [shape[0]]
    for size, step in zip(sizes, block):
        split += [size // step, step]
    rest = list(shape[1 + spatial :])
    blocks = [2 + 2 * axis for axis in range(spatial)]
    axes = [*blocks, 0, *(1 + 2 * axis for axis in range(spatial))]
    axes += list(range(1 + 2 * spatial, 1 + 2 * spatial + len(rest)))
    moved = relax.op.permute_dims(relax.op.reshape(padded, [*split, *rest]), axes)
    batch = shape[0]
    for step in block:
        batch *= step
    return relax.op.reshape(moved, [batch, *(s // b for s, b in zip(sizes, block)), *rest])


def batch_to_space(data, shape: tuple[int, ...], block: list[int], crops: list[list[int]]):
    """The inverse: the batch split into the block offsets and the images, each offset
    moved next to its spatial axis and merged into it, then ``crops`` cut off."""
    from tvm import relax

    spatial = len(block)
    batch = shape[0]
    for step in block:
        batch //= step
    sizes = list(shape[1 : 1 + spatial])
    rest = list(shape[1 + spatial :])
    split = relax.op.reshape(data, [*block, batch, *sizes, *rest])
    axes = [spatial]
    for axis in range(spatial):
        axes += [spatial + 1 + axis, axis]
    axes += list(range(1 + 2 * spatial, 1 + 2 * spatial + len(rest)))
    merged_sizes = [size * step for size, step in zip(sizes, block)]
    merged = relax.op.reshape(relax.op.permute_dims(split, axes), [batch, *merged_sizes, *rest])
    if not any(before or after for before, after in crops):
        return merged
    return relax.op.strided_slice(
        merged,
        axes=list(range(1, 1 + spatial)),
        begin=[before for before, _ in crops],
        end=[size - after for size, (_, after) in zip(merged_sizes, crops)],
    )

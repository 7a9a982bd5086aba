"""Sparse TFLite constants (``Tensor.sparsity``) decoded to dense arrays.

Converters store pruned weights sparse (``tf.lite.Optimize.EXPERIMENTAL_SPARSITY``) and
feed them to DENSIFY, to DEQUANTIZE or straight to a kernel; TVM wants dense constants.
This follows the TFLite schema's ``SparsityParameters`` (the decoder of TFLite's own
``FormatConverter::SparseToDense``): the stored values are listed in ``traversal_order``
over the original dimensions and then the block dimensions (``block_map`` says which
original dimension each block dimension splits), and each traversed dimension is either
DENSE (all ``dense_size`` positions) or SPARSE_CSR (per position of the dimensions before
it, a segment of ``array_segments`` giving which ``array_indices`` are present).
"""

from __future__ import annotations

import numpy as np

_DENSE = 0


def _index_vector(table, vector_type: int) -> np.ndarray:
    from tflite.Int32Vector import Int32Vector
    from tflite.Uint8Vector import Uint8Vector
    from tflite.Uint16Vector import Uint16Vector

    kind = {1: Int32Vector, 2: Uint16Vector, 3: Uint8Vector}[vector_type]
    vector = kind()
    vector.Init(table.Bytes, table.Pos)
    return vector.ValuesAsNumpy().astype(np.int64)


def densify(tensor, values: np.ndarray) -> np.ndarray:
    """The dense array of a sparse ``tflite.Tensor`` whose stored values are ``values``
    (flat, in traversal order), zeros elsewhere."""
    sparsity = tensor.Sparsity()
    shape = [int(d) for d in tensor.ShapeAsNumpy()]
    rank = len(shape)
    order = [int(d) for d in sparsity.TraversalOrderAsNumpy()]
    block_map = [int(d) for d in sparsity.BlockMapAsNumpy()] if sparsity.BlockMapLength() else []
    levels = [sparsity.DimMetadata(i) for i in range(sparsity.DimMetadataLength())]
    block_size = [levels[order[rank + b]].DenseSize() for b in range(len(block_map))]

    # walk the levels breadth first: one row per stored position reached so far
    coords = np.zeros((1, 0), np.int64)
    position = np.zeros(1, np.int64)  # index into this level's segments (CSR) or flat index
    for level in levels:
        if level.Format() == _DENSE:
            size = level.DenseSize()
            inner = np.tile(np.arange(size), len(position))
            coords = np.repeat(coords, size, axis=0)
            position = np.repeat(position, size) * size + inner
        else:
            segments = _index_vector(level.ArraySegments(), level.ArraySegmentsType())
            indices = _index_vector(level.ArrayIndices(), level.ArrayIndicesType())
            starts, counts = segments[position], segments[position + 1] - segments[position]
            position = (
                np.arange(counts.sum())
                - np.repeat(np.cumsum(counts) - counts, counts)
                + np.repeat(starts, counts)
            )
            inner = indices[position]
            coords = np.repeat(coords, counts, axis=0)
        coords = np.concatenate([coords, inner[:, None]], axis=1)

    original = np.zeros((len(coords), rank), np.int64)
    original[:, order[:rank]] = coords[:, :rank]
    for level_index in range(rank, len(order)):
        block = order[level_index] - rank
        dim = block_map[block]
        original[:, dim] = original[:, dim] * block_size[block] + coords[:, level_index]

    flat = values.reshape(-1)
    if len(flat) != len(original):
        raise ValueError(
            f"sparse tensor {tensor.Name().decode()!r} stores {len(flat)} values "
            f"but its sparsity parameters address {len(original)}"
        )
    dense = np.zeros(shape, flat.dtype)
    dense[tuple(original.T)] = flat
    return dense

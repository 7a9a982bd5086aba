"""What every importer returns: a Relax module plus the model's signature."""

from __future__ import annotations

import gc
import traceback
from dataclasses import dataclass, field
from typing import Any

ONNX_OPSET = 17


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorSpec:
        return cls(data["name"], tuple(data["shape"]), data.get("dtype", "float32"))


@dataclass
class ImportedModel:
    """A model in Relax with its weights bound as constants, and how to call it.

    ``inputs`` are in the order the module's ``main`` takes them. ``origin`` is the model
    as its framework holds it in memory (a Keras model, an ``onnx.ModelProto``), which
    ``source`` cannot give back: what :mod:`simpletvm.runtime.reference` runs to check a
    build's answers (a file it reads again).
    """

    mod: Any  # tvm.IRModule
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    source: str
    format: str
    details: dict[str, Any] = field(default_factory=dict)
    origin: Any = field(default=None, repr=False, compare=False)

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "inputs": [spec.to_dict() for spec in self.inputs],
            "outputs": [spec.to_dict() for spec in self.outputs],
            **self.details,
        }


def normalize_shapes(input_shapes: Any) -> dict[str, tuple[int, ...]] | None:
    """Accept ``{"name": shape}`` or a single shape (for one-input models)."""
    if input_shapes is None:
        return None
    if isinstance(input_shapes, dict):
        return {name: tuple(int(d) for d in shape) for name, shape in input_shapes.items()}
    return {"": tuple(int(d) for d in input_shapes)}


@dataclass(frozen=True)
class InputDims:
    """An input as the model declares it: ``dims`` None where a size is unknown (``None``
    itself: unknown rank), ``symbols`` the names the model gives those (ONNX dim_param)."""

    name: str
    dims: list[int | None] | None
    symbols: list[str | None] | None = None

    def symbol(self, axis: int) -> str | None:
        return self.symbols[axis] if self.symbols and axis < len(self.symbols) else None


def static_shapes(
    inputs: list[InputDims],
    given: dict[str, tuple[int, ...]] | None,
    batch_size: int,
    source: str,
) -> dict[str, tuple[int, ...]]:
    """Every input's static shape: the user's (``input_shapes``) if given, else the
    model's with an unknown batch (axis 0) set to ``batch_size``.

    Any other unknown size raises one ModelImportError that lists them all (input,
    axis, symbolic name) and shows the ``input_shapes=`` that fixes them.
    """
    from simpletvm.errors import ModelImportError

    shapes: dict[str, tuple[int, ...]] = {}
    unknown: list[tuple[InputDims, int | None]] = []
    for spec in inputs:
        if given and (spec.name in given or ("" in given and len(given) == 1)):
            shapes[spec.name] = given.get(spec.name, given.get(""))
            _refuse_changed_dimensions(spec, shapes[spec.name], source)
            continue
        if spec.dims is None:
            unknown.append((spec, None))
            continue
        dims = list(spec.dims)
        if dims and _unknown(dims[0]):
            dims[0] = batch_size
        unknown += [(spec, axis) for axis, size in enumerate(dims) if _unknown(size)]
        shapes[spec.name] = tuple(int(d) if not _unknown(d) else -1 for d in dims)
    if not unknown:
        return shapes
    listed = ", ".join(
        f"{spec.name!r} (rank unknown)"
        if axis is None
        else f"{spec.name!r} axis {axis}"
        + (f" ({spec.symbol(axis)!r})" if spec.symbol(axis) else "")
        for spec, axis in unknown
    )
    example = {}
    for spec, _ in unknown:
        if spec.dims is None:
            example[spec.name] = "[...]"
        else:
            example[spec.name] = (
                "["
                + ", ".join(
                    str(size) if size >= 0 else f"<{spec.symbol(axis) or 'size'}>"
                    for axis, size in enumerate(shapes[spec.name])
                )
                + "]"
            )
    shown = ", ".join(f"{name!r}: {shape}" for name, shape in example.items())
    raise ModelImportError(
        f"{source} has inputs with unknown dimensions: {listed}. Pass their sizes, e.g. "
        f"input_shapes={{{shown}}} with each <...> replaced by a size (an unknown batch "
        f"axis takes batch_size={batch_size})"
    )


def _refuse_changed_dimensions(spec: InputDims, shape: tuple[int, ...], source: str) -> None:
    """``input_shapes`` fills a model's unknown dimensions; a fixed one given another
    size (or another rank) would import a different model, which TVM then rejects deep
    inside (or, worse, accepts): refuse it here, naming the model's shape."""
    from simpletvm.errors import ModelImportError

    if spec.dims is None:
        return
    if len(shape) == len(spec.dims) and all(
        _unknown(known) or known == size for known, size in zip(spec.dims, shape)
    ):
        return
    declared = "[" + ", ".join("?" if _unknown(d) else str(d) for d in spec.dims) + "]"
    open_axes = [axis for axis, d in enumerate(spec.dims) if _unknown(d)]
    fill = (
        f"give only the unknown dimensions (axis {', '.join(map(str, open_axes))}, the '?' above)"
        if open_axes
        else "give only the unknown dimensions (it has none)"
    )
    raise ModelImportError(
        f"{source} declares input {spec.name!r} with the shape {declared}, and the input "
        f"shape given, {list(shape)}, changes its fixed dimensions: an input shape only "
        f"fills unknown dimensions. To import the model as it is, drop --input-shape "
        f"(input_shapes=), or {fill}"
    )


def _unknown(size: int | None) -> bool:
    return size is None or size <= 0


def unsupported_operators_error(
    source: str, described_format: str, missing: dict[str, tuple[int, str]], advice: str
):
    """One ModelImportError naming every operator TVM cannot import: its type, how many
    nodes use it and the first of them (``missing``: type -> (count, first node))."""
    from simpletvm.errors import ModelImportError

    listed = ", ".join(
        f"{op} x{count} (first: {first!r})" for op, (count, first) in sorted(missing.items())
    )
    return ModelImportError(
        f"TVM cannot import {source} ({described_format}): unsupported operators {listed}. {advice}"
    )


def release_frontend(error: BaseException | None) -> None:
    """Drop the locals of the frames ``error`` and its causes left, TVM's frontend among
    them: its block builder, left with a block open, warns when it is destroyed, and would
    do so on the terminal once the step that caught its output had ended."""
    while error is not None:
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__
    gc.collect()  # the converter and its builder refer to each other

"""What every importer returns: a Relax module plus the model's signature."""

from __future__ import annotations

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
    def from_dict(cls, data: dict[str, Any]) -> "TensorSpec":
        return cls(data["name"], tuple(data["shape"]), data.get("dtype", "float32"))


@dataclass
class ImportedModel:
    """A model in Relax with its weights bound as constants, and how to call it.

    ``inputs`` are in the order the module's ``main`` takes them.
    """

    mod: Any  # tvm.IRModule
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    source: str
    format: str
    details: dict[str, Any] = field(default_factory=dict)

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


def pick_shape(
    name: str, known: list[int | None], given: dict[str, tuple[int, ...]] | None,
    batch_size: int = 1,
) -> tuple[int, ...]:
    """A static input shape: the user's if given, else the model's with batch filled in."""
    from ..errors import ModelImportError

    if given:
        if name in given:
            return given[name]
        if "" in given and len(given) == 1:
            return given[""]
    dims = list(known)
    if dims and dims[0] in (None, -1, 0):
        dims[0] = batch_size
    if any(d in (None, -1, 0) for d in dims):
        raise ModelImportError(
            f"input {name!r} has an unknown dimension {known}: pass its shape, e.g. "
            f"input_shapes={{{name!r}: {[d if d not in (None, -1, 0) else 1 for d in known]}}}"
        )
    return tuple(int(d) for d in dims)

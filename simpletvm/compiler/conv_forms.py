"""Each convolution in the form that measures fastest: Winograd F(4,3), F(2,3) or direct.

A Winograd layer with few output tiles reads each of its transformed weights (up to 4x
the direct ones) only a few times, so whether it beats the next smaller form depends on
the machine's memory as much as on the multiplications saved: such a layer can run
well above its tuned estimate inside the model (BENCHMARKS.md). Such contested layers
(:func:`simpletvm.compiler.winograd.contested_layers`) are tuned in both forms: tuning takes its
tasks from the model in its default forms and from one variant per contested layer and
alternative form. The build then compares, per layer, the tasks that differ between the
two modules, their calls times their best measured latencies, and compiles each layer
in the faster form. A form whose tasks are not all measured is not chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from simpletvm.compiler.lowering import extract_tasks, fuse, to_layout, workload_key
from simpletvm.compiler.winograd import ConvSignature, contested_layers
from simpletvm.compiler.winograd.policy import second_form_built
from simpletvm.targets import ResolvedTarget


def form_name(tile_size: int | None) -> str:
    return "direct" if tile_size is None else f"F({tile_size},3)"


@dataclass(frozen=True)
class FormChoice:
    """The form a contested layer is built in, and the estimate behind the choice: per
    form, the ms of the tasks that only it has (None: not all of them measured)."""

    layer: ConvSignature
    chosen: int | None
    estimate_ms: dict[str, float | None]

    def describe(self) -> dict[str, Any]:
        return {
            "layer": str(self.layer),
            "form": form_name(self.chosen),
            "estimate_ms": self.estimate_ms,
        }


@dataclass(frozen=True)
class Rivalry:
    """One contested layer in its default form against its alternative one: the tasks
    (by workload key) that only the model in each form has."""

    layer: ConvSignature
    default_form: int | None
    form: int | None
    default_tasks: dict[str, Any]
    variant_tasks: dict[str, Any]


class ConvForms:
    """The fused modules of a model's forms: its default one, and a variant per contested
    layer with that layer in its alternative form (fused on first use).

    The layout conversion runs once, here; every fused module starts from its result."""

    def __init__(
        self, mod, target: ResolvedTarget, *, layout: str | None = "NHWC", **lowering: Any
    ):
        self._mod = to_layout(mod, target, layout)
        self._target = target
        self._lowering = {**lowering, "layout": None}  # converted already
        self.default = fuse(self._mod, target, **self._lowering)
        if target.device_type == "cpu" and lowering.get("winograd", True):
            self.contested = contested_layers(self._mod)
        else:
            self.contested = {}

    @cached_property
    def variants(self) -> dict[ConvSignature, Any]:
        """Contested layer -> the model fused with that layer in its alternative form
        (:func:`~simpletvm.compiler.winograd.forms_for` gives a layer at most two)."""
        return {layer: self._fuse({layer: forms[1]}) for layer, forms in self.contested.items()}

    def modules(self) -> list:
        """Every module tuning takes tasks from: the default one first."""
        return [self.default, *self.variants.values()]

    @cached_property
    def rivalries(self) -> list[Rivalry]:
        """Per contested layer, the tasks only the default module has and those only the
        layer's variant has."""
        default_tasks = _tasks_by_key(self.default, self._target)
        rivalries = []
        for layer, variant in self.variants.items():
            variant_tasks = _tasks_by_key(variant, self._target)
            default_form, form = self.contested[layer]
            rivalries.append(
                Rivalry(
                    layer,
                    default_form,
                    form,
                    {k: t for k, t in default_tasks.items() if k not in variant_tasks},
                    {k: t for k, t in variant_tasks.items() if k not in default_tasks},
                )
            )
        return rivalries

    def choose(self, latency_s: Callable[[Any], float | None]) -> tuple[Any, list[FormChoice]]:
        """The module to build, each contested layer in its fastest measured form, and
        the choices; ``latency_s(task)`` is a task's best measured latency or None."""
        choices = []
        for rivalry in self.rivalries:
            default_s = _estimate(rivalry.default_tasks, latency_s)
            variant_s = _estimate(rivalry.variant_tasks, latency_s)
            chosen = (
                rivalry.form if second_form_built(default_s, variant_s) else rivalry.default_form
            )
            choices.append(
                FormChoice(
                    rivalry.layer,
                    chosen,
                    {
                        form_name(rivalry.default_form): _ms(default_s),
                        form_name(rivalry.form): _ms(variant_s),
                    },
                )
            )
        changed = {c.layer: c.chosen for c in choices if c.chosen != self.contested[c.layer][0]}
        return (self._fuse(changed) if changed else self.default), choices

    def _fuse(self, forms: dict[ConvSignature, int | None]):
        return fuse(self._mod, self._target, winograd_forms=forms, **self._lowering)


def _tasks_by_key(fused, target) -> dict[str, Any]:

    return {workload_key(task.dispatched[0]): task for task in extract_tasks(fused, target)}


def _estimate(tasks: dict[str, Any], latency_s: Callable[[Any], float | None]) -> float | None:
    """Calls x best latency of ``tasks``, or None when one of them has no measurement."""
    total = 0.0
    for task in tasks.values():
        latency = latency_s(task)
        if latency is None:
            return None
        total += int(task.weight) * latency
    return total


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)

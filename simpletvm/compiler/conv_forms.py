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

That estimate is of kernels alone. The round inside the model
(:mod:`simpletvm.tuning.in_model`) times a layer the estimate moves to another form
against the form chosen before, and the store keeps its choice: a build follows the
round while the estimate still favours the form the round timed.
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

# a contested layer's last round inside the model, by the layer's key (layer_key): the
# form the kernels' estimate favoured then and the form chosen, or None before any round
KeptForm = Callable[[str], "tuple[int | None, int | None] | None"]


def form_name(tile_size: int | None) -> str:
    return "direct" if tile_size is None else f"F({tile_size},3)"


def layer_key(layer: ConvSignature) -> str:
    """A contested layer's key in the record store: input shape, output channels and
    padding (what makes two convolutions the same layer to the rewrite)."""
    shape = "x".join(str(d) for d in layer.data_shape)
    padding = ",".join(str(p) for p in layer.padding)
    return f"{shape}->{layer.out_channels} pad {padding}"


@dataclass(frozen=True)
class FormChoice:
    """The form a contested layer is built in, the form the kernels' estimate favours,
    and that estimate: per form, the ms of the tasks that only it has (None: not all of
    them measured). The two forms differ where a round inside the model chose otherwise."""

    layer: ConvSignature
    chosen: int | None
    estimate_ms: dict[str, float | None]
    estimated: int | None

    def describe(self) -> dict[str, Any]:
        described = {
            "layer": str(self.layer),
            "form": form_name(self.chosen),
            "estimate_ms": self.estimate_ms,
        }
        if self.chosen != self.estimated:
            described["chosen_in_model_over"] = form_name(self.estimated)
        return described


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
        self._fused: dict[frozenset, Any] = {}  # modules of other forms, by the forms changed
        if target.device_type == "cpu" and lowering.get("winograd", True):
            self.contested = contested_layers(self._mod)
        else:
            self.contested = {}

    @cached_property
    def variants(self) -> dict[ConvSignature, Any]:
        """Contested layer -> the model fused with that layer in its alternative form
        (:func:`~simpletvm.compiler.winograd.forms_for` gives a layer at most two)."""
        return {layer: self.module({layer: forms[1]}) for layer, forms in self.contested.items()}

    def modules(self) -> list:
        """Every module tuning takes tasks from: the default one first."""
        return [self.default, *self.variants.values()]

    @cached_property
    def rivalries(self) -> list[Rivalry]:
        """Per contested layer, the tasks only the default module has and those only the
        layer's variant has."""
        default_tasks = tasks_by_key(self.default, self._target)
        rivalries = []
        for layer, variant in self.variants.items():
            variant_tasks = tasks_by_key(variant, self._target)
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

    def choose(
        self, latency_s: Callable[[Any], float | None], kept: KeptForm | None = None
    ) -> tuple[Any, list[FormChoice]]:
        """The module to build and the choices: each contested layer in the form its
        measured kernels favour (``latency_s(task)``: a task's best measured latency, or
        None), unless its last round inside the model (``kept``, e.g.
        :meth:`~simpletvm.tuning.database.RecordDatabase.kept_form`) timed that same
        preference and chose the other form."""
        choices = []
        for rivalry in self.rivalries:
            default_s = _estimate(rivalry.default_tasks, latency_s)
            variant_s = _estimate(rivalry.variant_tasks, latency_s)
            estimated = (
                rivalry.form if second_form_built(default_s, variant_s) else rivalry.default_form
            )
            last = kept(layer_key(rivalry.layer)) if kept is not None else None
            held = (
                last is not None
                and last[0] == estimated
                and last[1] in (rivalry.default_form, rivalry.form)
            )
            choices.append(
                FormChoice(
                    rivalry.layer,
                    last[1] if held else estimated,
                    {
                        form_name(rivalry.default_form): _ms(default_s),
                        form_name(rivalry.form): _ms(variant_s),
                    },
                    estimated,
                )
            )
        return self.module({c.layer: c.chosen for c in choices}), choices

    def incumbent_forms(self, kept: KeptForm) -> dict[ConvSignature, int | None]:
        """Each contested layer's form as its last round inside the model chose it (its
        default form before any round): the forms of the model a round times against."""
        forms = {}
        for layer, (default_form, form) in self.contested.items():
            last = kept(layer_key(layer))
            forms[layer] = (
                last[1] if last is not None and last[1] in (default_form, form) else default_form
            )
        return forms

    def module(self, forms: dict[ConvSignature, int | None]):
        """The model fused with contested layers in the given forms (the others, and
        layers not given, in their default form)."""
        changed = {layer: form for layer, form in forms.items() if form != self.contested[layer][0]}
        if not changed:
            return self.default
        key = frozenset(changed.items())
        if key not in self._fused:
            self._fused[key] = self._fuse(changed)
        return self._fused[key]

    def form_tasks(self, layer: ConvSignature, form: int | None) -> dict[str, Any]:
        """The tasks (by workload key) that only ``layer`` in ``form`` has, against its
        other form."""
        rivalry = next(r for r in self.rivalries if r.layer == layer)
        return rivalry.default_tasks if form == rivalry.default_form else rivalry.variant_tasks

    def _fuse(self, forms: dict[ConvSignature, int | None]):
        return fuse(self._mod, self._target, winograd_forms=forms, **self._lowering)


def tasks_by_key(fused, target) -> dict[str, Any]:
    """A fused module's tuning tasks by workload key."""
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

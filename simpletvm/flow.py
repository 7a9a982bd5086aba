"""The flow a SimpleTVM follows (from_model -> autotune -> build -> save -> load -> run ->
evaluate): its states, the moves between them, and the refusal, naming the fix, of a
step called in a state it cannot run in."""

from __future__ import annotations

from enum import StrEnum

from simpletvm.errors import FlowError


class FlowState(StrEnum):
    """Where a SimpleTVM is in its flow: a closed set; each step checks it may run in
    the current state (:func:`require`) and moves only along ``NEXT``."""

    NEW = "new"
    IMPORTED = "imported"  # from_model(): a Relax module to tune or build
    BUILT = "built"  # build(): a module compiled here, to save, run or evaluate
    LOADED = "loaded"  # load(): a saved module, compiled already


# the states each state may move to: importing and loading start over from anywhere
NEXT = {
    FlowState.NEW: {FlowState.IMPORTED, FlowState.LOADED},
    FlowState.IMPORTED: {FlowState.IMPORTED, FlowState.BUILT, FlowState.LOADED},
    FlowState.BUILT: {FlowState.IMPORTED, FlowState.BUILT, FlowState.LOADED},
    FlowState.LOADED: {FlowState.IMPORTED, FlowState.LOADED},
}


def move(current: FlowState, state: FlowState) -> FlowState:
    """``state``, when the flow may go there from ``current``."""
    if state not in NEXT[current]:
        raise FlowError(f"a SimpleTVM cannot go from {current} to {state}")
    return state


def require(current: FlowState, step: str, *states: FlowState) -> None:
    """Refuse ``step`` unless the flow is in one of ``states``, naming the fix."""
    if current in states:
        return
    if FlowState.IMPORTED in states:  # steps that work on the imported model
        if current is FlowState.LOADED:
            raise FlowError(
                f"{step} needs an imported model, but this SimpleTVM holds a module "
                "loaded with load(), which is already compiled: call from_model() to "
                "import the model again"
            )
        raise FlowError(f"{step} needs a model: call from_model() first")
    if states == (FlowState.BUILT,):
        if current is FlowState.LOADED:
            raise FlowError(
                f"{step} needs a module built here; a loaded module is "
                "saved already (under the run id it was loaded from)"
            )
        raise FlowError(f"{step} needs a built module: call build() first")
    raise FlowError(f"{step} needs a module: call build() or load() first")

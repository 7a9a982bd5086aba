"""The round inside the model that follows a search: one object owns when it is due, what
a ``minutes`` budget keeps for it, and its run (the timing itself is
:mod:`simpletvm.tuning.in_model`, its choices kept by
:mod:`simpletvm.tuning.in_model_store`).

autotune() and the scheduler's jobs make one :class:`InModelRound` per search: its
:attr:`~InModelRound.reserve_s` shortens the search's budget, :meth:`~InModelRound.due`
says whether the search was long enough to be followed by the round, and
:meth:`~InModelRound.after_search` runs it. ``SimpleTVM.choose_in_model`` runs one on its
own.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from simpletvm.errors import SimpleTVMError

if TYPE_CHECKING:
    from simpletvm.tuning.in_model import InModelTiming

# a search this long (or a minutes budget this long) is followed by the round: for a
# shorter tuning its two builds and their timing would take too large a share of the wait
DUE_AFTER_S = 60.0
# what a minutes budget keeps for the round: a base for building the model twice ...
RESERVE_BASE_S = 10.0
# ... and a share for each kernel of the model, timed in both builds and, the first time,
# checked against TVM's naive schedule as it is built (compiler/build.py) ...
RESERVE_PER_KERNEL_S = 1.0
# ... but never more than this share of the budget, so the search keeps the larger part
RESERVE_MAX_SHARE = 0.5


class InModelRound:
    """The round inside the model for ``stvm``'s search of ``minutes`` (None: no budget).

    ``asked``: as ``autotune(in_model=...)`` takes it: True or False decide, None lets the
    round follow a search long enough on this machine's CPU. ``devices_here``: an RPC
    tracker's devices are servers on this machine (those superb and the service start),
    so the model runs on this CPU all the same.
    """

    def __init__(
        self,
        stvm,
        minutes: float | None = None,
        asked: bool | None = None,
        *,
        devices_here: bool = False,
    ):
        self.stvm = stvm
        self.minutes = minutes
        self.asked = asked
        self.devices_here = devices_here

    @property
    def runs_here(self) -> bool:
        """The model runs on this machine's CPU: not another device, not through RPC
        unless the tracker's devices are servers on this machine."""
        target = self.stvm.target
        return (
            target.device_type == "cpu"
            and target.runs_here
            and (self.stvm.rpc_tracker is None or self.devices_here)
        )

    @property
    def reserve_s(self) -> float:
        """Seconds the ``minutes`` budget keeps for the round after its search (0: none
        is planned, or there is no budget)."""
        if self.minutes is None or not self.runs_here or not self.due(0.0):
            return 0.0
        import tvm

        functions = self.stvm.conv_forms.default.functions_items()
        kernels = sum(isinstance(func, tvm.tirx.PrimFunc) for _, func in functions)
        return min(
            RESERVE_BASE_S + RESERVE_PER_KERNEL_S * kernels,
            RESERVE_MAX_SHARE * self.minutes * 60,
        )

    def due(self, searched_s: float) -> bool:
        """Whether a search that took ``searched_s`` is followed by the round: as
        ``asked`` says, else when the model runs on this machine's CPU and the budget or
        the search was :data:`DUE_AFTER_S` or more."""
        if self.asked is not None:
            return self.asked
        long_enough = searched_s >= DUE_AFTER_S or (
            self.minutes is not None and self.minutes * 60 >= DUE_AFTER_S
        )
        return long_enough and self.runs_here

    def after_search(self, display=None) -> None:
        """Run the round after the search, told on a progress ``display`` if given. When
        it was not asked for, a worker that cannot time warns instead of raising: the
        search's records are in the store either way."""
        from simpletvm.runtime.in_situ import InSituTimingFailed

        if display is not None:
            display.then("timing the tuned kernels inside the model")
        try:
            timing = self.run("run")
        except InSituTimingFailed as error:
            if self.asked is True:
                raise
            warnings.warn(
                f"the tuned kernels were not timed inside the model ({error}); "
                "build() applies every record",
                stacklevel=4,
            )
            if display is not None:
                display.then("not timed inside the model")
            return
        if display is not None:
            from simpletvm.console import ms_text

            kernels = ms_text(self.stvm.tuning_summary["estimated_latency_s"])
            display.then(
                f"timed inside the model: {ms_text(timing.chosen_model_ms / 1e3)} ms, "
                f"the model as a whole (its kernels timed alone: {kernels} ms)"
            )

    def run(self, records: str = "run") -> InModelTiming:
        """Time each task's challenger against its incumbent inside the model built here
        and keep the choices in the store (``records`` as for build()); the session's
        ``in_model`` holds the timing, its context an ``in_model`` step."""
        stvm = self.stvm
        if not self.runs_here:
            raise SimpleTVMError(
                "choose_in_model() times kernels inside the model on this machine's CPU; "
                f"the target ({stvm.target.kind}) or an RPC tracker puts the model "
                "elsewhere: build there with the records as they are"
            )
        from simpletvm.tuning.database import records_database
        from simpletvm.tuning.in_model import choose_in_model

        context = stvm.context
        database = records_database(
            records, stvm.records_for_build(), stvm.target.tvm_target(), context.run_id
        )
        with context.step("in_model", records=records) as step:
            timing = choose_in_model(
                stvm.conv_forms,
                stvm.target,
                database,
                [(list(spec.shape), spec.dtype) for spec in stvm.model.inputs],
                # on the threads the build will run on: pinned, else chosen as it chooses
                threads=context.num_threads or stvm.target.host_cores(),
                choose_threads=context.num_threads is None,
            )
            step.update(timing.step_fields())
        stvm.in_model = timing
        if stvm.tuning_summary is not None and records == "run":
            # the promise: what the module built from these choices runs in, here
            stvm.tuning_summary["in_model_latency_s"] = timing.chosen_model_ms / 1e3
            context.tuning["in_model_latency_s"] = timing.chosen_model_ms / 1e3
        return timing

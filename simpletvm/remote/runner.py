"""The profile stage's runner through an RPC tracker: it measures on the server of the
device its stage was granted.

MetaSchedule's RPCRunner asks the tracker for any free server of one key. A scheduler
that owns several devices of a key reserves one of them for each profile stage, so the
runner must ask for that device's server only: it follows a
:class:`~simpletvm.remote.rpc.DeviceGrant` and keeps one RPCRunner (one worker process) per
server key it has measured on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simpletvm.remote.rpc import DeviceGrant, require_servers


class DeviceRunner:
    """Runs candidates on the server ``device`` names at the time of each profile stage.

    Args:
        tracker: ``(host, port)`` of the RPC tracker.
        device: which server of the job's device key the next profile stage reaches.
        make_runner: ``make_runner(server_key)`` -> a MetaSchedule runner measuring on
            servers registered under ``server_key``.
    """

    def __init__(
        self, tracker: tuple[str, int], device: DeviceGrant, make_runner: Callable[[str], Any]
    ) -> None:
        self.tracker = tracker
        self.device = device
        self.make_runner = make_runner
        self._runners: dict[str, Any] = {}

    def require_device(self) -> None:
        """Raise a clear error (naming the server's key and how to start one) when no
        server of the granted device is registered: the profile would wait forever."""
        require_servers(*self.tracker, self.device.server_key)

    def run(self, runner_inputs: list) -> list:
        key = self.device.server_key
        if key not in self._runners:
            self._runners[key] = self.make_runner(key)
        return self._runners[key].run(runner_inputs)


def rpc_runner(options, device_type: str, tracker: tuple[str, int], device_key: str):
    """MetaSchedule's RPC runner on servers registered under ``device_key``, timing
    candidates as the job's options say (timeout, cache mode, evaluator)."""
    from tvm.s_tir import meta_schedule as ms

    from simpletvm._process.orphans import exit_with_this_process
    from simpletvm.tuning.timing import evaluator_config, resolve_cache_mode

    timeout = options.resolved_timeout(device_type)
    mode = resolve_cache_mode(options.cache_flush, device_type=device_type, local=False)
    return ms.runner.RPCRunner(
        rpc_config=ms.runner.RPCConfig(
            tracker_host=tracker[0],
            tracker_port=int(tracker[1]),
            tracker_key=device_key,
            session_timeout_sec=max(1, int(timeout)),
        ),
        evaluator_config=evaluator_config(options, mode),
        max_workers=1,
        initializer=exit_with_this_process(),
    )

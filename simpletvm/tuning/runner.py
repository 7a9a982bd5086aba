"""The profile stage's runner through an RPC tracker: it measures on the server of the
device its stage was granted.

MetaSchedule's RPCRunner asks the tracker for any free server of one key. A scheduler
that owns several devices of a key reserves one of them for each profile stage, so the
runner must ask for that device's server only: it follows a
:class:`~simpletvm.rpc.DeviceGrant` and keeps one RPCRunner (one worker process) per
server key it has measured on.
"""

from __future__ import annotations

from typing import Any, Callable

from ..rpc import DeviceGrant, require_servers


class DeviceRunner:
    """Runs candidates on the server ``device`` names at the time of each profile stage.

    Args:
        tracker: ``(host, port)`` of the RPC tracker.
        device: which server of the job's device key the next profile stage reaches.
        make_runner: ``make_runner(server_key)`` -> a MetaSchedule runner measuring on
            servers registered under ``server_key``.
    """

    def __init__(self, tracker: tuple[str, int], device: DeviceGrant,
                 make_runner: Callable[[str], Any]) -> None:
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

"""The RPC tracker and servers a sweep profiles through, and the signals that stop them
and a sweep.

For a sweep, superb starts them in a helper process that dies with it
(:class:`simpletvm.remote.local_devices.LocalDevices`). ``superb tracker`` and ``superb
server`` run the same :class:`simpletvm.remote.rpc.LocalRPC` in the foreground for a
multi-machine setup.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from simpletvm.remote.rpc import LocalRPC

START_TIMEOUT_S = 60.0


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); ValueError with the expected form otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def serve_until_signalled(infrastructure: LocalRPC, announce) -> None:
    """Start, announce the tracker's address, and run until SIGINT or SIGTERM."""
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        with infrastructure:
            announce(infrastructure.address)
            while not stop.wait(0.5):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM (a batch system, kill) stops the sweep like Ctrl-C does."""

    def interrupt(*_):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (embedded use)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

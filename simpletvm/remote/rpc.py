"""TVM's RPC tracker and servers, started and stopped by SimpleTVM itself.

Profiling goes through an RPC server registered with a tracker under a device key
(thesis ch. 2.4.2). A server serves one session at a time, so one server per device
gives a job exclusive use of it. Without a tracker of the user's, SimpleTVM starts a
local tracker and one server for the duration of autotuning, as the thesis' did.
A built module runs, or is timed, on such a server through :func:`remote_module`.

The tracker hands out any free server of a key. When a scheduler owns several devices
of one key, each device's server registers under a key of its own, ``<key>.<n>``
(:func:`device_keys`), the scheduler's device resource carries that name, and a stage
granted the resource asks the tracker for that key only (:func:`server_key`,
:class:`DeviceGrant`): no other job's stage can be handed that server meanwhile.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from simpletvm.errors import SimpleTVMError

TRACKER_PORTS = (9190, 9199)
SERVER_PORTS = (9091, 9199)
LOOPBACK = "127.0.0.1"


def tracker_summary(host: str, port: int) -> dict:
    """The tracker's view: registered servers and queued requests per key."""
    import socket

    from tvm import rpc

    try:
        # TVM's client retries for a minute; a refused port should fail at once
        socket.create_connection((host, int(port)), timeout=5).close()
        client = rpc.connect_tracker(host, int(port))
    except Exception as error:  # socket errors of every kind
        raise SimpleTVMError(
            f"cannot reach the RPC tracker at {host}:{port} ({error}): start one with "
            "`python -m tvm.exec.rpc_tracker` or leave rpc_tracker unset"
        ) from error
    try:
        return client.summary()
    finally:
        client.close()


def registered_servers(host: str, port: int, key: str) -> int:
    """How many servers of ``key`` are connected to the tracker, free or busy."""
    servers = tracker_summary(host, port).get("server_info", [])
    return sum(1 for server in servers if server.get("key") == f"server:{key}")


def require_servers(host: str, port: int, key: str) -> None:
    """Raise a clear error when no server of ``key`` is alive at the tracker: profiling
    would otherwise wait for one forever."""
    if registered_servers(host, port, key) == 0:
        raise SimpleTVMError(
            f"no RPC server with device key {key!r} is registered at {host}:{port}: "
            f"it stopped or was never started; start one with `python -m tvm.exec.rpc_server "
            f"--tracker {host}:{port} --key {key}` (or `superb server`) and run again"
        )


def device_keys(key: str, count: int) -> list[str]:
    """The RPC keys of ``count`` devices of ``key`` whose servers register one device each
    (``LocalRPC(..., key_per_server=True)``): ``<key>.0``, ``<key>.1``, ... A scheduler's
    device resource named so stands for that one server."""
    return [f"{key}.{index}" for index in range(count)]


def server_key(key: str, resource_name: str) -> str:
    """The RPC key a stage granted the device resource ``resource_name`` of device key
    ``key`` profiles or evaluates under: the resource's name when it names a server of
    its own (``<key>.<anything>``, see :func:`device_keys`), else ``key`` itself (the one
    resource stands for every server of ``key``, and the tracker picks a free one)."""
    return resource_name if resource_name.startswith(f"{key}.") else key


@dataclass
class DeviceGrant:
    """Which server of device key ``key`` a job's device stages reach.

    Until a scheduler grants a device, ``server_key`` is ``key``: any free server of it,
    what a job running alone wants. A scheduler's adapter calls :meth:`grant` with each
    device stage's resource before the stage runs, so the stage reaches the server of
    the device the scheduler reserved for it.
    """

    key: str
    server_key: str = ""

    def __post_init__(self) -> None:
        self.server_key = self.server_key or self.key

    def grant(self, resource_name: str) -> None:
        self.server_key = server_key(self.key, resource_name)

    def __str__(self) -> str:
        """The device as a run's context records its stages: ``device:<server key>``."""
        return f"device:{self.server_key}"


def free_servers(host: str, port: int, key: str) -> int:
    """How many servers of ``key`` the tracker can hand out now."""
    queue = tracker_summary(host, port).get("queue_info", {}).get(key, {})
    return int(queue.get("free", 0))


def wait_for_servers(host: str, port: int, key: str, count: int, timeout: float = 30.0) -> None:
    """Block until ``count`` servers of ``key`` are registered and free."""
    deadline = time.monotonic() + timeout
    while free_servers(host, port, key) < count:
        if time.monotonic() > deadline:
            raise SimpleTVMError(
                f"only {free_servers(host, port, key)} of {count} RPC servers with key "
                f"{key!r} registered at {host}:{port} within {timeout:.0f} s"
            )
        time.sleep(0.1)


def request_session(host: str, port: int, key: str, session_timeout: float = 0):
    """A session on a free server of ``key`` (waiting for one) and that server's address.

    TVM's ``TrackerSession.request`` does the same but keeps the address to itself; the
    address is what tells a report which device ran.
    """
    import socket
    import struct

    from tvm import rpc
    from tvm.rpc import base

    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.settimeout(None)  # the tracker answers when a server is free
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
            raise SimpleTVMError(f"{host}:{port} is not a TVM RPC tracker")
        base.sendjson(sock, [base.TrackerCode.REQUEST, key, "", 1])
        answer = base.recvjson(sock)
    if answer[0] != base.TrackerCode.SUCCESS:
        raise SimpleTVMError(f"the RPC tracker at {host}:{port} refused a {key!r} server: {answer}")
    server_host, server_port, match_key = answer[1]
    session = rpc.connect(server_host, int(server_port), match_key, session_timeout)
    return session, (str(server_host), int(server_port))


@dataclass
class RemoteModule:
    """A library loaded by a server for one session: its VM runs there."""

    library: Any  # the remote runtime.Module
    session: Any  # tvm.rpc.RPCSession
    server: tuple[str, int]

    def device(self, device_type: str):
        return self.session.device(device_type)


def remote_module(tracker: tuple[str, int], key: str, library_path: str | Path) -> RemoteModule:
    """Upload an exported library to a server of ``key`` and load it there.

    The server, which serves one session at a time, is held for as long as the returned
    module or anything made from it (a VM, tensors on its device) is referenced: TVM
    ends an RPC session when its last reference goes.
    """
    require_servers(*tracker, key)
    session, server = request_session(*tracker, key)
    name = Path(library_path).name
    session.upload(str(library_path), name)
    return RemoteModule(session.load_module(name), session, server)


@dataclass
class RemoteTracker:
    """A tracker the user runs; checked to be reachable with a server of ``key``."""

    host: str
    port: int
    key: str

    @property
    def address(self) -> tuple[str, int]:
        return self.host, int(self.port)

    def __enter__(self) -> RemoteTracker:
        require_servers(self.host, self.port, self.key)
        return self

    def __exit__(self, *exc) -> None:
        return None


@dataclass
class LocalRPC:
    """A tracker (unless ``tracker`` names a running one) plus ``servers`` servers for
    each device key, on this machine.

    The servers of a key register under it, and the tracker hands out any free one; with
    ``key_per_server`` each registers under a key of its own (:func:`device_keys`), one
    device each, for a scheduler to grant. With ``log_dir``, each server logs its
    sessions (who connected, what it loaded) to ``<log_dir>/<its RPC key>.log``.
    Ports are the first free ones in TVM's ranges (the tracker's ``port`` when given).
    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    keys: list[str]
    servers: int = 1
    host: str = LOOPBACK
    tracker: tuple[str, int] | None = None
    port: int | None = None
    key_per_server: bool = False
    log_dir: Path | None = None
    _tracker: object = field(default=None, init=False, repr=False)
    _servers: dict = field(default_factory=dict, init=False, repr=False)  # handle -> key

    @property
    def key(self) -> str:
        """The first device key: the one a single-device setup profiles on."""
        return self.keys[0]

    @property
    def address(self) -> tuple[str, int]:
        if self.tracker is not None:
            return self.tracker
        if self._tracker is None:
            raise SimpleTVMError("the local RPC tracker is not running: call start() first")
        host = self.host if self.host not in ("0.0.0.0", "") else LOOPBACK
        return host, int(self._tracker.port)

    def server_keys(self, key: str) -> list[str]:
        """The RPC keys the servers of device key ``key`` register under (one per server
        with ``key_per_server``, else ``key`` once)."""
        return device_keys(key, self.servers) if self.key_per_server else [key]

    def start(self, timeout: float = 30.0) -> LocalRPC:
        from tvm.rpc.tracker import Tracker

        try:
            if self.tracker is None:
                low, high = (self.port, self.port + 1) if self.port else TRACKER_PORTS
                self._tracker = _exits_with_this_process(Tracker(self.host, low, high, silent=True))
            registered = {
                name: 1 if self.key_per_server else self.servers
                for key in self.keys
                for name in self.server_keys(key)
            }
            for name, count in registered.items():
                for _ in range(count):
                    self.add_server(name)
            for name, count in registered.items():
                wait_for_servers(*self.address, name, count, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def add_server(self, key: str):
        """Start one more server registered under ``key``; returns it (``.proc`` is its
        process, ``.port`` its port)."""
        from tvm.rpc.server import Server

        log = None if self.log_dir is None else Path(self.log_dir) / f"{key}.log"
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        server = Server(
            self.host,
            *SERVER_PORTS,
            tracker_addr=self.address,
            key=key,
            silent=log is None,
            server_init_callback=partial(_log_sessions_to, str(log)) if log else None,
        )
        _exits_with_this_process(server)
        self._servers[server] = key
        return server

    @property
    def server_handles(self) -> list:
        """The servers started so far (``terminate()`` stops one)."""
        return list(self._servers)

    def server_of(self, key: str):
        """The first server started under the RPC key ``key`` (with ``key_per_server``,
        the one device a resource of that name stands for)."""
        for server, registered in self._servers.items():
            if registered == key:
                return server
        raise KeyError(
            f"no server of this LocalRPC registers under {key!r}; "
            f"keys: {sorted(set(self._servers.values()))}"
        )

    def stop(self) -> None:
        for server in self._servers:
            server.terminate()
        self._servers.clear()
        if self._tracker is not None:
            self._tracker.terminate()
            self._tracker = None

    def __enter__(self) -> LocalRPC:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _exits_with_this_process(handle):
    """Make a TVM Tracker's or Server's process exit once this one is gone: it runs the
    tracker or server in a thread that is not a daemon, so it outlives a SIGKILLed owner.
    Its worker waits for the next function once the thread is started."""
    from simpletvm._process.orphans import exit_with_this_process

    handle.proc.send(exit_with_this_process())
    handle.proc.recv()
    return handle


def _log_sessions_to(path: str) -> None:
    """In a server's process, before it starts: TVM's server log goes to ``path``."""
    server_log = logging.getLogger("RPCServer")  # tvm.rpc.server's logger
    for handler in list(server_log.handlers):
        server_log.removeHandler(handler)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    server_log.addHandler(handler)

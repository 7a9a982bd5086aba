"""Resources by role, their occupancy, and which of them are still in rotation."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.base import CLIENT, DEVICE, Resource


def client(name: str = "client", capacity: int = 1) -> Resource:
    """The host that runs select, build and update; ``capacity`` concurrent stages."""
    return Resource(name, CLIENT, capacity)


def device_role(key: str) -> str:
    """The role of the devices registered under ``key``: what a job's device stages name."""
    return f"{DEVICE}:{key}"


def device(name: str, key: str = "default") -> Resource:
    """One target device registered under ``key``; exclusive (capacity 1)."""
    return Resource(name, device_role(key), 1)


def devices(key: str = "default", count: int = 1, prefix: str | None = None) -> list[Resource]:
    """``count`` devices of one key, named ``<prefix><i>`` (prefix defaults to the key)."""
    stem = key if prefix is None else prefix
    return [device(f"{stem}{i}", key) for i in range(count)]


class ResourcePool:
    """Tracks how many stages run on each resource and retires failing devices.

    A device that fails ``max_consecutive_failures`` stages in a row is taken out of
    rotation: it is most likely down, and every further stage sent there would fail too.
    Client resources are never retired; they are the host the scheduler runs beside.
    """

    def __init__(self, resources: Iterable[Resource], max_consecutive_failures: int = 3) -> None:
        self.resources: dict[str, Resource] = {}
        for resource in resources:
            if resource.name in self.resources:
                raise ValueError(f"duplicate resource name {resource.name!r}")
            self.resources[resource.name] = resource
        if not self.resources:
            raise ValueError("a scheduler needs at least one resource")
        if max_consecutive_failures < 1:
            raise ValueError("max_consecutive_failures must be >= 1")
        self.max_consecutive_failures = max_consecutive_failures
        self.running: dict[str, int] = {name: 0 for name in self.resources}
        self.failures: dict[str, int] = {name: 0 for name in self.resources}
        self.retired: dict[str, str] = {}
        self._by_role: dict[str, list[Resource]] = {}
        for resource in self.resources.values():
            self._by_role.setdefault(resource.role, []).append(resource)

    def roles(self) -> list[str]:
        return list(self._by_role)

    def in_rotation(self, role: str) -> list[Resource]:
        """Resources of ``role`` that may still receive stages, in declaration order."""
        return [r for r in self._by_role.get(role, ()) if r.name not in self.retired]

    def free_slots(self, name: str) -> int:
        if name in self.retired:
            return 0
        return max(0, self.resources[name].capacity - self.running[name])

    def free(self, role: str) -> list[Resource]:
        """Resources of ``role`` in rotation with at least one free slot."""
        return [r for r in self.in_rotation(role) if self.running[r.name] < r.capacity]

    def slots(self, role: str) -> list[str]:
        """One resource name per free slot of ``role``, in declaration order."""
        return [r.name for r in self.free(role) for _ in range(self.free_slots(r.name))]

    def acquire(self, name: str, exclusive: bool = True) -> None:
        if name in self.retired:
            raise ValueError(f"resource {name!r} is out of rotation: {self.retired[name]}")
        if exclusive and self.free_slots(name) == 0:
            raise ValueError(f"resource {name!r} is busy ({self.running[name]} running)")
        self.running[name] += 1

    def release(self, name: str, ok: bool | None) -> bool:
        """Free one slot and count the outcome (None: a stage stopped from outside, which
        says nothing about the resource); True if this retired the resource."""
        self.running[name] -= 1
        if ok is None:
            return False
        if ok:
            self.failures[name] = 0
            return False
        self.failures[name] += 1
        resource = self.resources[name]
        if (
            resource.kind == DEVICE
            and name not in self.retired
            and self.failures[name] >= self.max_consecutive_failures
        ):
            self.retired[name] = f"{self.failures[name]} consecutive failed stages"
            return True
        return False

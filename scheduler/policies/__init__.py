"""Scheduling policies, by name or as objects."""

from __future__ import annotations

from scheduler.policies.base import Policy, Start
from scheduler.policies.predictive import Predictive
from scheduler.policies.round_robin import RoundRobin
from scheduler.policies.sequential import Sequential
from scheduler.policies.synchronous import Synchronous

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (RoundRobin, Sequential, Synchronous, Predictive)
}


def get_policy(policy: Policy | str) -> Policy:
    """A policy object as given, or a fresh one for a registered name."""
    if isinstance(policy, Policy):
        return policy
    try:
        return POLICIES[policy]()
    except KeyError:
        raise ValueError(
            f"unknown policy {policy!r}; valid names: {', '.join(sorted(POLICIES))}"
        ) from None


__all__ = ["POLICIES", "Policy", "Predictive", "RoundRobin", "Sequential", "Start", "Synchronous", "get_policy"]

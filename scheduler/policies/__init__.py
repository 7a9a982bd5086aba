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
# other names users have written for a policy: superb's --policy once said "interleaved"
POLICY_ALIASES = {"interleaved": RoundRobin.name}


def policy_name(name: str) -> str:
    """The registered name for ``name`` (itself, or what an alias stands for); an unknown
    name is refused with the valid ones."""
    name = POLICY_ALIASES.get(name, name)
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid names: {', '.join(sorted(POLICIES))}")
    return name


def get_policy(policy: Policy | str) -> Policy:
    """A policy object as given, or a fresh one for a registered name or alias."""
    if isinstance(policy, Policy):
        return policy
    return POLICIES[policy_name(policy)]()


__all__ = [
    "POLICIES",
    "POLICY_ALIASES",
    "Policy",
    "Predictive",
    "RoundRobin",
    "Sequential",
    "Start",
    "Synchronous",
    "get_policy",
    "policy_name",
]

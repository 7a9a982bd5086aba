"""Each policy's decisions on hand-built states, and the policy registry."""

from __future__ import annotations

import pytest

from scheduler import Scheduler, Stage, State, client, device, devices, get_policy
from scheduler.policies import POLICIES, Predictive, RoundRobin, Sequential, Start, Synchronous

SELECT = Stage("select", "client")
BUILD = Stage("build", "client")
PROFILE = Stage("profile", "device:gpu")
UPDATE = Stage("update", "client")


def gpu_state(device_count: int = 2, client_capacity: int = 1) -> State:
    return State([client(capacity=client_capacity), *devices("gpu", device_count)])


def test_round_robin_gives_each_free_resource_the_longest_waiting_job() -> None:
    state = gpu_state(device_count=2)
    for job in "abc":
        state.add_job(job, PROFILE)
    state.add_job("d", SELECT)
    assert RoundRobin().decide(state) == [
        Start("a", PROFILE, "gpu0"),
        Start("b", PROFILE, "gpu1"),
        Start("d", SELECT, "client"),
    ]


def test_round_robin_postpones_a_stage_whose_resource_is_busy() -> None:
    state = gpu_state(device_count=1)
    state.add_job("a", PROFILE)
    state.add_job("b", PROFILE)
    policy = RoundRobin()
    (first,) = policy.decide(state)
    state.start(first.job_id, first.resource_name)
    assert policy.decide(state) == []  # b waits; a is running, so it is not queued again
    state.finish("a", UPDATE)
    assert policy.decide(state) == [Start("b", PROFILE, "gpu0"), Start("a", UPDATE, "client")]


def test_round_robin_fills_every_slot_of_a_client_with_capacity() -> None:
    state = gpu_state(client_capacity=2)
    for job in "abc":
        state.add_job(job, SELECT)
    starts = RoundRobin().decide(state)
    assert [(s.job_id, s.resource_name) for s in starts] == [("a", "client"), ("b", "client")]


def test_sequential_runs_only_the_oldest_unfinished_job() -> None:
    state = gpu_state()
    state.add_job("a", SELECT)
    state.add_job("b", SELECT)
    policy = Sequential()
    assert policy.decide(state) == [Start("a", SELECT, "client")]
    state.start("a", "client")
    state.finish("a", PROFILE)
    # The client is free and b is ready, but b must wait for a to complete.
    assert policy.decide(state) == [Start("a", PROFILE, "gpu0")]
    state.start("a", "gpu0")
    assert policy.decide(state) == []
    state.finish("a", None)
    assert policy.decide(state) == [Start("b", SELECT, "client")]


def test_synchronous_waits_for_the_whole_batch_then_oversubscribes_one_device() -> None:
    state = gpu_state(device_count=2)
    policy = Synchronous()
    for job in "abc":
        state.add_job(job, SELECT)
    assert [s.resource_name for s in policy.decide(state)] == ["client"] * 3
    for job in "abc":
        state.start(job, "client", exclusive=False)
    state.finish("a", PROFILE)
    assert policy.decide(state) == []  # b and c still selecting
    state.finish("b", PROFILE)
    state.finish("c", PROFILE)
    starts = policy.decide(state)
    assert [(s.job_id, s.resource_name) for s in starts] == [
        ("a", "gpu0"),
        ("b", "gpu0"),
        ("c", "gpu0"),
    ]
    assert not Synchronous.exclusive


def test_synchronous_takes_late_jobs_into_the_next_batch() -> None:
    state = gpu_state()
    policy = Synchronous()
    state.add_job("a", SELECT)
    assert policy.decide(state) == [Start("a", SELECT, "client")]
    state.start("a", "client", exclusive=False)
    state.add_job("late", SELECT)
    state.finish("a", None)
    assert policy.decide(state) == [Start("late", SELECT, "client")]


def teach(policy: Predictive, job: str, durations: dict[str, float]) -> None:
    """Feed one finished iteration of select, build, profile, update to the policy."""
    cycle = [SELECT, BUILD, PROFILE, UPDATE, SELECT]
    for stage, following in zip(cycle, cycle[1:]):
        policy.stage_finished(job, stage, following, durations[stage.name])


def test_predictive_learns_means_and_falls_back_to_estimate_then_kind_then_prior() -> None:
    policy = Predictive(prior=7.0)
    assert policy.estimate("a", Stage("build", "client")) == 7.0
    assert policy.estimate("a", Stage("build", "client", estimate=3.0)) == 3.0
    policy.stage_finished("b", BUILD, PROFILE, 4.0)
    policy.stage_finished("b", BUILD, PROFILE, 6.0)
    assert policy.estimate("a", BUILD) == 5.0
    policy.stage_finished("a", BUILD, PROFILE, 1.0)
    assert policy.estimate("a", Stage("build", "client", estimate=3.0)) == 1.0
    outlook = policy.outlook("a", BUILD)
    assert outlook.lead == 1.0 and outlook.device_stage == PROFILE


def test_predictive_runs_a_job_to_the_device_before_starting_another() -> None:
    state = gpu_state(device_count=2)
    policy = Predictive()
    state.add_job("a", SELECT)
    state.add_job("b", SELECT)
    state.start("a", "client")
    policy.stage_finished("a", SELECT, BUILD, 22.0)
    state.finish("a", BUILD)
    # Round-robin would start b's select (b has waited longer); predictive keeps a going.
    assert RoundRobin().decide(state) == [Start("b", SELECT, "client")]
    assert policy.decide(state) == [Start("a", BUILD, "client")]


def test_predictive_feeds_a_bottleneck_device_with_the_shortest_lead() -> None:
    # Device-heavy jobs d1, d2 and a client-heavy job c; d1 profiles now.
    state = gpu_state(device_count=1)
    policy = Predictive()
    heavy_device = {"select": 1.0, "build": 1.0, "profile": 30.0, "update": 1.0}
    heavy_client = {"select": 20.0, "build": 10.0, "profile": 1.0, "update": 20.0}
    teach(policy, "d1", heavy_device)
    teach(policy, "d2", heavy_device)
    teach(policy, "c", heavy_client)
    state.add_job("c", SELECT)
    state.add_job("d2", SELECT)
    state.add_job("d1", PROFILE)
    state.start("d1", "gpu0")
    state.time = 25.0  # d1's profile is predicted to end in 5 s
    assert policy.decide(state) == [Start("d2", SELECT, "client")]
    assert RoundRobin().decide(state) == [Start("c", SELECT, "client")]
    # With the device busy for long enough, predictive goes back to round-robin order.
    state.time = 0.0
    assert policy.decide(state) == [Start("c", SELECT, "client")]


def test_get_policy_accepts_names_and_objects() -> None:
    assert set(POLICIES) == {"round-robin", "sequential", "synchronous", "predictive"}
    for name, cls in POLICIES.items():
        assert isinstance(get_policy(name), cls)
    policy = Predictive(prior=2.0)
    assert get_policy(policy) is policy


def test_unknown_policy_name_lists_the_valid_ones() -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown policy 'fifo'; valid names: predictive, round-robin, "
        r"sequential, synchronous",
    ):
        get_policy("fifo")
    with pytest.raises(ValueError, match="unknown policy"):
        Scheduler([client()], policy="fifo", backend="threads")


def test_state_refuses_a_busy_device_and_a_wrong_role() -> None:
    state = State([client(), device("gpu0", "gpu")])
    state.add_job("a", PROFILE)
    state.add_job("b", PROFILE)
    state.add_job("c", SELECT)
    state.start("a", "gpu0")
    with pytest.raises(ValueError, match="busy"):
        state.start("b", "gpu0")
    with pytest.raises(ValueError, match="needs 'client'"):
        state.start("c", "gpu0", exclusive=False)
    with pytest.raises(ValueError, match="running, not ready"):
        state.start("a", "gpu0")


def test_the_policy_names_superb_once_used_are_aliases_of_the_schedulers() -> None:
    from scheduler.policies import policy_name

    assert policy_name("interleaved") == "round-robin"
    assert isinstance(get_policy("interleaved"), RoundRobin)
    assert policy_name("predictive") == "predictive"
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        policy_name("fifo")

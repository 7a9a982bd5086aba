"""The suite runs on every core (pytest-xdist, ``-n auto --dist loadgroup`` in
pyproject.toml); these hooks decide what may run side by side.

- A module's tests run in one worker, so its module-scoped fixtures (a tuned model, a
  sweep, an RPC tracker) are made once; ``@pytest.mark.xdist_group(name)`` puts tests of
  several modules in one worker instead (two local Ray instances at once would race).
  The group becomes part of each test's id, which pytest 9.2 no longer lets xdist do
  (hence the pin in pyproject.toml).
  The groups with the most slow tests go out first, so that the last minutes do not find
  one worker busy with a long module and the other idle.
- ``@pytest.mark.image``: builds and runs the container images, minutes of work beyond
  the suite's time. Left out (deselected) unless the run's ``-m`` names the marker:
  ``pytest tests/docker -m image -n 0``, a step of its own in .ci/run.
- SimpleTVM's user cache (``SIMPLETVM_CACHE_DIR``: the kernels' pool library, the
  schedule checks this machine has made) is a directory of the session's, shared by its
  workers: the tests meet the same kernels again and again, yet nothing carries over
  from an earlier session or from the user's own work.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest

CACHE_VARIABLE = "SIMPLETVM_CACHE_DIR"
# the user's own cache directory, put back when the session ends
_users_cache: list[str | None] = []


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:
        return  # the controlling process made the directory; the workers inherit it
    _users_cache.append(os.environ.get(CACHE_VARIABLE))
    os.environ[CACHE_VARIABLE] = tempfile.mkdtemp(prefix="simpletvm-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    if _users_cache:
        shutil.rmtree(os.environ.pop(CACHE_VARIABLE), ignore_errors=True)
        if _users_cache[0] is not None:
            os.environ[CACHE_VARIABLE] = _users_cache.pop()


def _image_tests_chosen(config: pytest.Config) -> bool:
    """Whether -m names the image marker (then -m alone decides, ``not image`` too)."""
    return re.search(r"\bimage\b", config.getoption("markexpr", "") or "") is not None


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _image_tests_chosen(config):
        return "image tests (marker image): left out; run them with -m image"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _image_tests_chosen(config):
        left_out = [item for item in items if item.get_closest_marker("image")]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker("image")]
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    slow: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        group = _group(item)
        slow[group] = slow.get(group, 0) + (item.get_closest_marker("slow") is not None)
        first.setdefault(group, index)
    # stable: the tests of a group keep their order
    items.sort(key=lambda item: (-slow[_group(item)], first[_group(item)]))


def _group(item: pytest.Item) -> str:
    return item.get_closest_marker("xdist_group").args[0]

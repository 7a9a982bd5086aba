"""The docker (or podman) run command line that docker/simpletvm-docker builds, and how
it runs it.

No engine is needed: the command is checked as data, and a stand-in `docker` or `podman`
on PATH records what the helper executes. test_docker_build.py runs the real thing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from docker_helpers import HELPER_PATH, simpletvm_docker

UID, GID = 1234, 5678


def command_for(*argv, environ, cwd, terminal=False):
    options = simpletvm_docker.parse_args(list(argv))
    return simpletvm_docker.docker_command(
        options,
        environ=environ,
        cwd=str(cwd),
        uid=UID,
        gid=GID,
        hostname="bench-host",
        terminal=terminal,
    )


def option_values(command, name):
    """Every value given to docker run's option ``name``, up to the image."""
    return [command[i + 1] for i, arg in enumerate(command) if arg == name]


def split_at_image(command, image):
    position = command.index(image)
    return command[:position], command[position + 1 :]


@pytest.fixture
def host(tmp_path):
    """A home without a store yet and a working directory with a grid file."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "grid.yaml").write_text("fixed: {target: cpu}\n")
    return {"HOME": str(home)}, work


def test_cpu_command_mounts_store_and_workdir_and_runs_as_the_caller(host):
    environ, work = host
    command = command_for("run", "grid.yaml", environ=environ, cwd=work)
    docker_args, superb_args = split_at_image(command, "simpletvm:cpu")
    assert docker_args[:4] == ["docker", "run", "--rm", "--init"]
    assert superb_args == ["run", "grid.yaml"]
    assert option_values(docker_args, "--user") == ["1234:5678"]
    assert option_values(docker_args, "--hostname") == ["bench-host"]
    assert option_values(docker_args, "--mount") == [
        f"type=bind,src={environ['HOME']}/tvm-benchmark,dst=/tvm-benchmark",
        f"type=bind,src={work},dst=/workspace",
    ]
    assert option_values(docker_args, "--env") == ["SIMPLETVM_HOME=/tvm-benchmark"]
    assert option_values(docker_args, "--workdir") == ["/workspace"]
    assert "--gpus" not in docker_args
    assert "--tty" not in docker_args


def test_simpletvm_home_chooses_the_mounted_store(host):
    environ, work = host
    command = command_for(
        "report", "x", environ={**environ, "SIMPLETVM_HOME": "stores/a"}, cwd=work
    )
    assert f"type=bind,src={work}/stores/a,dst=/tvm-benchmark" in command
    assert "SIMPLETVM_HOME=/tvm-benchmark" in command


def test_cuda_command_passes_the_gpus(host):
    environ, work = host
    command = command_for("--target", "cuda", "run", "grid.yaml", environ=environ, cwd=work)
    docker_args, superb_args = split_at_image(command, "simpletvm:cuda")
    assert option_values(docker_args, "--gpus") == ["all"]
    assert superb_args == ["run", "grid.yaml"]

    command = command_for(
        "--target", "cuda", "--gpus", "device=1", "plan", "grid.yaml", environ=environ, cwd=work
    )
    assert option_values(command, "--gpus") == ["device=1"]


def test_gpus_for_the_cpu_image_is_refused(host, monkeypatch, capsys):
    environ, work = host
    with pytest.raises(simpletvm_docker.UsageError, match="--gpus needs --target cuda"):
        command_for("--gpus", "all", "run", "grid.yaml", environ=environ, cwd=work)
    monkeypatch.chdir(work)
    assert simpletvm_docker.main(["--gpus", "all", "--print", "run", "grid.yaml"]) == 2
    assert "--gpus needs --target cuda" in capsys.readouterr().err


def test_hub_cache_is_mounted_only_when_set(host, tmp_path):
    environ, work = host
    assert not any("TFHUB_CACHE_DIR" in arg for arg in command_for(environ=environ, cwd=work))

    command = command_for(environ={**environ, "TFHUB_CACHE_DIR": str(tmp_path / "hub")}, cwd=work)
    assert f"type=bind,src={tmp_path}/hub,dst=/tfhub-cache" in option_values(command, "--mount")
    assert "TFHUB_CACHE_DIR=/tfhub-cache" in option_values(command, "--env")


def test_extra_mounts_variables_docker_arguments_and_image(host, tmp_path):
    environ, work = host
    (work / "models").mkdir()
    data = tmp_path / "data"
    data.mkdir()
    command = command_for(
        "--mount",
        "models:ro",
        "--mount",
        f"{data}:/data",
        "--env",
        "TVM_NUM_THREADS=4",
        "--env",
        "TVM_LOG_DEBUG",
        "--docker-arg=--network=host",
        "--image",
        "lab/stvm:dev",
        "run",
        "grid.yaml",
        environ=environ,
        cwd=work,
    )
    docker_args, superb_args = split_at_image(command, "lab/stvm:dev")
    assert option_values(docker_args, "--mount")[-2:] == [
        f"type=bind,src={work}/models,dst={work}/models,readonly",
        f"type=bind,src={data},dst=/data",
    ]
    assert option_values(docker_args, "--env")[-2:] == ["TVM_NUM_THREADS=4", "TVM_LOG_DEBUG"]
    assert docker_args[-1] == "--network=host"
    assert superb_args == ["run", "grid.yaml"]


@pytest.mark.parametrize(
    "spec, problem",
    [
        ("missing", "does not exist on this host"),
        ("models:relative/path", "must be absolute"),
        ("models:/a:/b", "expected SRC[:DST][:ro]"),
    ],
)
def test_bad_mounts_are_usage_errors(host, spec, problem):
    environ, work = host
    (work / "models").mkdir()
    with pytest.raises(simpletvm_docker.UsageError, match=re.escape(problem)):
        command_for("--mount", spec, environ=environ, cwd=work)


def test_everything_after_the_options_goes_to_superb(host):
    environ, work = host
    command = command_for(
        "run", "grid.yaml", "--target", "cuda", "--jobs", "2", environ=environ, cwd=work
    )
    assert split_at_image(command, "simpletvm:cpu")[1] == [
        "run",
        "grid.yaml",
        "--target",
        "cuda",
        "--jobs",
        "2",
    ]
    assert "--gpus" not in command

    command = command_for("--target", "cuda", "--", "--help", environ=environ, cwd=work)
    assert split_at_image(command, "simpletvm:cuda")[1] == ["--help"]


def test_a_terminal_gets_a_terminal_in_the_container(host):
    environ, work = host
    command = command_for("run", "grid.yaml", environ=environ, cwd=work, terminal=True)
    docker_args, _ = split_at_image(command, "simpletvm:cpu")
    assert {"--interactive", "--tty"} <= set(docker_args)


def run_helper(*argv, cwd, environ):
    return subprocess.run(
        [sys.executable, str(HELPER_PATH), *argv],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_print_shows_the_command_and_needs_no_docker(host, tmp_path):
    environ, work = host
    environ = {**environ, "PATH": str(tmp_path / "empty")}
    result = run_helper(
        "--target", "cuda", "--print", "run", "grid.yaml", cwd=work, environ=environ
    )
    assert result.returncode == 0, result.stderr
    options = simpletvm_docker.parse_args(["--target", "cuda", "run", "grid.yaml"])
    assert shlex.split(result.stdout) == simpletvm_docker.docker_command(
        options,
        environ=environ,
        cwd=str(work),
        uid=os.getuid(),
        gid=os.getgid(),
        hostname=socket.gethostname(),
        terminal=False,
    )
    assert not Path(environ["HOME"], "tvm-benchmark").exists()


@pytest.mark.parametrize(
    "target, hint", [("cpu", "Install Docker Engine"), ("cuda", "NVIDIA Container Toolkit")]
)
def test_missing_docker_names_the_problem_and_the_fix(host, tmp_path, target, hint):
    environ, work = host
    result = run_helper(
        "--target",
        target,
        "run",
        "grid.yaml",
        cwd=work,
        environ={**environ, "PATH": str(tmp_path / "empty")},
    )
    assert result.returncode == 127
    assert "neither docker nor podman is on PATH" in result.stderr
    assert hint in result.stderr and "Podman" in result.stderr
    assert "Traceback" not in result.stderr

    result = run_helper(
        "--engine",
        "podman",
        "run",
        "grid.yaml",
        cwd=work,
        environ={**environ, "PATH": str(tmp_path / "empty")},
    )
    assert result.returncode == 127
    assert "podman is not on PATH. Install Podman" in result.stderr


def fake_engine(bin_dir: Path, name: str, record: Path) -> None:
    """A stand-in engine that records its arguments and exits 3."""
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / name
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\nsys.exit(3)\n"
    )
    fake.chmod(0o755)


def test_runs_docker_with_the_command_and_returns_its_exit_code(host, tmp_path):
    environ, work = host
    bin_dir, record = tmp_path / "bin", tmp_path / "argv.json"
    fake_engine(bin_dir, "docker", record)
    environ = {**environ, "PATH": str(bin_dir), "TFHUB_CACHE_DIR": str(tmp_path / "hub")}

    result = run_helper("--target", "cuda", "run", "grid.yaml", cwd=work, environ=environ)

    assert result.returncode == 3, result.stderr
    options = simpletvm_docker.parse_args(["--target", "cuda", "run", "grid.yaml"])
    expected = simpletvm_docker.docker_command(
        options,
        environ=environ,
        cwd=str(work),
        uid=os.getuid(),
        gid=os.getgid(),
        hostname=socket.gethostname(),
        terminal=False,
    )
    assert json.loads(record.read_text()) == expected[1:]
    assert Path(environ["HOME"], "tvm-benchmark").is_dir()  # the store, owned by the caller
    assert (tmp_path / "hub").is_dir()


def test_podman_gets_the_same_mounts_and_user(host):
    environ, work = host
    docker = command_for("run", "grid.yaml", environ=environ, cwd=work)
    podman = command_for("--engine", "podman", "run", "grid.yaml", environ=environ, cwd=work)
    assert podman[0] == "podman"
    # the caller (1234) is not root: rootless Podman, which maps the ids (next test)
    assert [arg for arg in podman[1:] if arg != "--userns=keep-id"] == docker[1:]


def test_rootless_podman_keeps_the_callers_id_in_the_container(host):
    """Rootless Podman maps container ids into the caller's subordinate ids, so --user
    alone would write the store as some other id: keep-id maps the caller to itself.
    Root's Podman, like Docker, uses the host's ids as they are."""
    environ, work = host
    rootless = command_for("--engine", "podman", "plan", "grid.yaml", environ=environ, cwd=work)
    assert rootless.index("--userns=keep-id") < rootless.index("--user")
    assert option_values(rootless, "--user") == ["1234:5678"]

    options = simpletvm_docker.parse_args(["--engine", "podman", "plan", "grid.yaml"])
    rootful = simpletvm_docker.docker_command(
        options, environ=environ, cwd=str(work), uid=0, gid=0, hostname="h", terminal=False
    )
    assert "--userns=keep-id" not in rootful
    assert option_values(rootful, "--user") == ["0:0"]
    assert "--userns=keep-id" not in command_for("plan", "grid.yaml", environ=environ, cwd=work)


@pytest.mark.parametrize(
    "gpus, devices",
    [
        (None, ["nvidia.com/gpu=all"]),
        ("all", ["nvidia.com/gpu=all"]),
        ("device=1", ["nvidia.com/gpu=1"]),
        ('"device=0,2"', ["nvidia.com/gpu=0", "nvidia.com/gpu=2"]),
    ],
)
def test_podman_gets_the_gpus_as_cdi_devices(host, gpus, devices):
    environ, work = host
    argv = ["--engine", "podman", "--target", "cuda"] + (["--gpus", gpus] if gpus else [])
    command = command_for(*argv, "run", "grid.yaml", environ=environ, cwd=work)
    assert option_values(command, "--device") == devices
    assert "--gpus" not in command


def test_podman_refuses_gpus_it_cannot_name(host):
    environ, work = host
    with pytest.raises(simpletvm_docker.UsageError, match="Podman takes all or device="):
        command_for(
            "--engine",
            "podman",
            "--target",
            "cuda",
            "--gpus",
            "2",
            "run",
            "g.yaml",
            environ=environ,
            cwd=work,
        )


def test_the_default_engine_is_the_installed_one():
    def installed(*names):
        return lambda name: f"/usr/bin/{name}" if name in names else None

    assert simpletvm_docker.default_engine(installed("docker", "podman")) == "docker"
    assert simpletvm_docker.default_engine(installed("podman")) == "podman"
    assert simpletvm_docker.default_engine(installed()) == "docker"


def test_a_first_argument_simpletvm_runs_simpletvm(host):
    environ, work = host
    command = command_for("simpletvm", "quickstart", "--minutes", "1", environ=environ, cwd=work)
    docker_args, arguments = split_at_image(command, "simpletvm:cpu")
    assert option_values(docker_args, "--entrypoint") == ["simpletvm"]
    assert arguments == ["quickstart", "--minutes", "1"]

    command = command_for("superb", "run", "grid.yaml", environ=environ, cwd=work)
    docker_args, arguments = split_at_image(command, "simpletvm:cpu")
    assert "--entrypoint" not in docker_args
    assert arguments == ["run", "grid.yaml"]


def test_engine_arg_is_the_new_name_of_docker_arg(host):
    environ, work = host
    command = command_for(
        "--engine-arg=--network=host",
        "--docker-arg=--pull=never",
        "plan",
        "grid.yaml",
        environ=environ,
        cwd=work,
    )
    docker_args, _ = split_at_image(command, "simpletvm:cpu")
    assert docker_args[-2:] == ["--network=host", "--pull=never"]


def test_runs_podman_when_docker_is_not_installed(host, tmp_path):
    environ, work = host
    bin_dir, record = tmp_path / "bin", tmp_path / "argv.json"
    fake_engine(bin_dir, "podman", record)
    environ = {**environ, "PATH": str(bin_dir)}

    result = run_helper("simpletvm", "quickstart", cwd=work, environ=environ)

    assert result.returncode == 3, result.stderr
    options = simpletvm_docker.parse_args(["--engine", "podman", "simpletvm", "quickstart"])
    expected = simpletvm_docker.docker_command(
        options,
        environ=environ,
        cwd=str(work),
        uid=os.getuid(),
        gid=os.getgid(),
        hostname=socket.gethostname(),
        terminal=False,
    )
    assert json.loads(record.read_text()) == expected[1:]

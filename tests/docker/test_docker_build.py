"""The images, built and run: the CPU image from this checkout, superb and the quickstart
in it through docker/simpletvm-docker with the run store mounted; and the CUDA
Dockerfile's Python layers, as far as they build without NVIDIA's base.

Minutes of work, so marked ``image``, and tests/conftest.py leaves them out of a run
whose -m does not name that marker; .ci/run runs them as a step of their own:

    python -m pytest tests/docker -m image -n 0

The engine is Podman (SIMPLETVM_IMAGE_ENGINE=docker for Docker), the base the Debian 12
image that docker/base-image.sh makes from Debian's archive, since no registry need be
reachable (SIMPLETVM_IMAGE_BASE names another, e.g. python:3.11.14-slim-bookworm). What
this machine's Podman needs (cgroupfs, runc, ulimits no higher than the caller's) is the
harness's: a containers.conf written here, CONTAINERS_CONF pointed at it; the images and
the helper a user runs know nothing of it. Images are tagged simpletvm-test:*, and kept,
so that a rerun on an unchanged checkout reuses their layers.
"""

from __future__ import annotations

import contextlib
import csv
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from docker_helpers import DOCKERFILES, HELPER_PATH, REPO

from simpletvm.testing import tiny_cnn_onnx

pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]

ENGINE = os.environ.get("SIMPLETVM_IMAGE_ENGINE") or (
    "podman" if shutil.which("podman") else "docker"
)
LOCAL_BASE = "localhost/simpletvm-base:bookworm"
BASE = os.environ.get("SIMPLETVM_IMAGE_BASE") or LOCAL_BASE
CPU_IMAGE = "localhost/simpletvm-test:cpu"
CUDA_PYTHON_IMAGE = "localhost/simpletvm-test:cuda-python"
# this host's CA bundle, lent to the build for pip's TLS (an intercepting proxy's CA is
# in it where there is one; elsewhere it holds what the image's own bundle holds)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_SECONDS = 3000
ULIMIT = 4096  # open files and processes in the containers (see containers_conf)
# a rootless Podman user (with /etc/subuid ranges) for the keep-id test; .ci/run makes one
ROOTLESS_USER = os.environ.get("SIMPLETVM_IMAGE_ROOTLESS_USER")


def say(request, text: str) -> None:
    """A line on the terminal even while pytest captures output (sizes and times)."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(text, flush=True)


def containers_conf(path: Path) -> Path:
    """Podman's settings for this machine: cgroupfs (hybrid cgroups), runc (crun refuses
    them), and ulimits that the container's init may set without CAP_SYS_RESOURCE:
    Podman's own defaults (nofile 1048576) are higher than the caller's, and the init
    starts from lower ones than the caller's (nproc 32768 here): 4096, as measured on
    this machine, or the caller's own where lower."""
    limits = []
    for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = resource.getrlimit(which)
        value = min(v for v in (soft, hard, ULIMIT) if v != resource.RLIM_INFINITY)
        limits.append(f'"{name}={value}:{value}"')
    runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""
    path.write_text(
        f"[containers]\ndefault_ulimits = [{', '.join(limits)}]\n"
        f'[engine]\ncgroup_manager = "cgroupfs"\n{runtime}'
    )
    return path


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory):
    """The environment the engine runs in here, or a skip saying why it cannot run."""
    if not shutil.which(ENGINE):
        pytest.skip(
            f"{ENGINE} is not installed (.ci/run installs podman, runc and "
            "debootstrap with apt-get)"
        )
    environ = dict(os.environ)
    if ENGINE == "podman":
        conf = containers_conf(tmp_path_factory.mktemp("engine") / "containers.conf")
        environ["CONTAINERS_CONF"] = str(conf)
    info = subprocess.run(
        [ENGINE, "info"], capture_output=True, text=True, env=environ, timeout=120
    )
    if info.returncode != 0:
        pytest.skip(f"{ENGINE} cannot run here: {info.stderr.strip()[-500:]}")
    return environ


def engine(environ, *args, timeout=600, check=True, **kwargs):
    result = subprocess.run(
        [ENGINE, *args], capture_output=True, text=True, env=environ, timeout=timeout, **kwargs
    )
    if check:
        assert result.returncode == 0, (
            f"{ENGINE} {' '.join(args)}: exit {result.returncode}\n{result.stderr[-3000:]}"
        )
    return result


def image_id(environ, tag: str) -> str | None:
    found = engine(environ, "image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def build(request, environ, log: Path, dockerfile: Path, tag: str, *build_args: str) -> float:
    """Build ``dockerfile`` from this checkout; returns the seconds it took. The image
    this replaces goes (its layers stay while the new one uses them)."""
    previous = image_id(environ, tag)
    command = [ENGINE, "build", "-f", str(dockerfile), "-t", tag]
    if ENGINE == "podman" and CA_BUNDLE.is_file():  # docker build has no volumes
        command += ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    for arg in build_args:
        command += ["--build-arg", arg]
    started = time.monotonic()
    with open(log, "w") as output:
        result = subprocess.run(
            [*command, str(REPO)],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environ,
            timeout=BUILD_SECONDS,
        )
    seconds = time.monotonic() - started
    assert result.returncode == 0, (
        f"{' '.join(command)} {REPO}: exit {result.returncode}\n"
        + "".join(log.read_text().splitlines(True)[-60:])
    )
    if previous not in (None, image_id(environ, tag)):
        engine(environ, "rmi", previous, check=False)
    size = int(engine(environ, "image", "inspect", "--format", "{{.Size}}", tag).stdout)
    say(
        request,
        f"\nimage {tag}: {size / 1e9:.2f} GB, built in {seconds:.0f} s ({' '.join(build_args)})",
    )
    return seconds


@pytest.fixture(scope="module")
def base_image(request, engine_env):
    """The base: docker/base-image.sh's when it is not there yet (or another, named)."""
    if engine(engine_env, "image", "inspect", BASE, check=False).returncode == 0:
        return BASE
    assert BASE == LOCAL_BASE, f"{BASE} is not in {ENGINE}'s images: pull it first"
    started = time.monotonic()
    result = subprocess.run(
        [str(REPO / "docker" / "base-image.sh"), "--engine", ENGINE, "--tag", LOCAL_BASE],
        capture_output=True,
        text=True,
        env=engine_env,
        timeout=BUILD_SECONDS,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    say(request, f"\nbase {LOCAL_BASE} made in {time.monotonic() - started:.0f} s")
    return LOCAL_BASE


@pytest.fixture(scope="module")
def cpu_image(request, engine_env, base_image, tmp_path_factory):
    log = tmp_path_factory.mktemp("build") / "cpu.log"
    build(request, engine_env, log, DOCKERFILES["cpu"], CPU_IMAGE, f"BASE_IMAGE={base_image}")
    return CPU_IMAGE


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A working directory with the tests' tiny model and a two-run grid (untuned, and
    tuned for a few trials), and where the run store goes."""
    work = tmp_path_factory.mktemp("work")
    tiny_cnn_onnx(work / "tiny.onnx")
    (work / "grid.yaml").write_text(
        "name: image\n"
        "fixed: {model: /workspace/tiny.onnx, trials: 2, candidates_per_iteration: 2,\n"
        "        population: 16, genetic_iterations: 1, transfer_learning: false,\n"
        "        evaluate_repeat: 5, save: true}\n"
        "grid:\n"
        "  autotune: [false, true]\n"
    )
    return work, tmp_path_factory.mktemp("home") / "store"


def helper(engine_env, image, store, cwd, *argv, timeout=1200):
    """docker/simpletvm-docker as a user runs it, with the store in SIMPLETVM_HOME."""
    return subprocess.run(
        [sys.executable, str(HELPER_PATH), "--engine", ENGINE, "--image", image, *argv],
        cwd=cwd,
        env={**engine_env, "SIMPLETVM_HOME": str(store)},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def not_the_callers(*folders: Path) -> list[str]:
    """Every file and folder below ``folders`` that is not the calling user's."""
    mine = (os.getuid(), os.getgid())
    return [
        f"{path} ({path.lstat().st_uid}:{path.lstat().st_gid})"
        for folder in folders
        for path in [folder, *folder.rglob("*")]
        if (path.lstat().st_uid, path.lstat().st_gid) != mine
    ]


def test_superb_plans_and_runs_a_grid_in_the_cpu_image(request, engine_env, cpu_image, host):
    work, store = host
    plan = helper(engine_env, cpu_image, store, work, "plan", "grid.yaml", timeout=300)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "2 runs, 0 already done" in plan.stdout, plan.stdout

    started = time.monotonic()
    run = helper(engine_env, cpu_image, store, work, "run", "grid.yaml", "--jobs", "2")
    say(request, f"\nsuperb run of two runs in the image: {time.monotonic() - started:.0f} s")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    rows = list(csv.DictReader(open(store / "superb" / "image" / "runs.csv")))
    assert sorted(row["param:autotune"] for row in rows) == ["False", "True"], rows
    assert [row["status"] for row in rows] == ["ok", "ok"], rows
    for row in rows:
        assert (store / "modules" / row["run_id"] / "metadata.json").is_file(), row
        assert list((store / "modules" / row["run_id"]).glob("*.so")), row
    assert not_the_callers(store, work) == []


def test_quickstart_runs_in_the_cpu_image(request, engine_env, cpu_image, host):
    work, store = host
    before = set((store / "modules").glob("*")) if (store / "modules").exists() else set()
    started = time.monotonic()
    quickstart = helper(
        engine_env,
        cpu_image,
        store,
        work,
        "simpletvm",
        "quickstart",
        "--image-size",
        "32",
        "--minutes",
        "0.1",
    )
    say(request, f"\nsimpletvm quickstart in the image: {time.monotonic() - started:.0f} s")
    assert quickstart.returncode == 0, quickstart.stdout[-3000:] + quickstart.stderr[-3000:]
    saved = set((store / "modules").glob("*")) - before
    assert len(saved) == 1, quickstart.stdout
    assert list(saved.pop().glob("*.so")), quickstart.stdout
    assert not_the_callers(store, work) == []


def test_cuda_dockerfile_builds_its_python_layers_on_the_debian_base(
    request, engine_env, base_image, tmp_path_factory
):
    """NVIDIA's CUDA 13 base is out of reach here, and Debian's CUDA is 11.8: the stage
    that brings CUDA, its compiler and Python (cuda-python) is not built. Everything
    after it is: debian-python gives the compiler and Python 3.11 instead, then the
    install, the user and the environment of cuda.Dockerfile."""
    log = tmp_path_factory.mktemp("build") / "cuda.log"
    build(
        request,
        engine_env,
        log,
        DOCKERFILES["cuda"],
        CUDA_PYTHON_IMAGE,
        f"BASE_IMAGE={base_image}",
        "PYTHON_STAGE=debian-python",
    )
    probe = engine(
        engine_env,
        "run",
        "--rm",
        "--entrypoint",
        "python",
        CUDA_PYTHON_IMAGE,
        "-c",
        "import os, tvm, simpletvm, superb.cli; "
        "print(os.getuid(), tvm.__version__, os.environ['TVM_CUDA_COMPILE_MODE'], "
        "tvm.runtime.enabled('cuda'))",
    )
    uid, version, mode, cuda_enabled = probe.stdout.split()
    assert (uid, mode) == ("1000", "nvcc")
    assert version.startswith("0.27")
    # the wheel carries the CUDA runtime module; without libcudart.so.13 it cannot load
    assert cuda_enabled == "False"


@pytest.fixture(scope="module")
def rootless_user():
    """The user named by SIMPLETVM_IMAGE_ROOTLESS_USER, for whom Podman runs rootless."""
    if ENGINE != "podman":
        pytest.skip("rootless user mapping is Podman's (--userns=keep-id)")
    if not ROOTLESS_USER:
        pytest.skip(
            "set SIMPLETVM_IMAGE_ROOTLESS_USER to a user with /etc/subuid ranges "
            "(.ci/run makes one) to run Podman rootless"
        )
    if os.getuid() != 0:
        pytest.skip("switching to the rootless user needs root")
    try:
        user = pwd.getpwnam(ROOTLESS_USER)
    except KeyError:
        pytest.skip(f"SIMPLETVM_IMAGE_ROOTLESS_USER: there is no user {ROOTLESS_USER}")
    if not any(
        line.split(":")[0] in (user.pw_name, str(user.pw_uid))
        for line in Path("/etc/subuid").read_text().splitlines()
        if line
    ):
        pytest.skip(f"{ROOTLESS_USER} has no subordinate ids in /etc/subuid")
    return user


def test_rootless_podman_writes_the_store_as_the_caller(engine_env, base_image, rootless_user):
    """Rootless Podman maps the container's ids into the caller's subordinate ids: the
    helper's --userns=keep-id makes the caller's id the same inside, so the files it
    writes in the mounted store are the caller's. The small base image stands in for
    SimpleTVM's (the helper's mounts and user are the same whatever the image)."""
    user = rootless_user
    scratch = Path(tempfile.mkdtemp(prefix="simpletvm-rootless-"))
    runtime, work, conf = scratch / "runtime", scratch / "work", scratch / "containers.conf"
    environ = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": user.pw_dir,
        "USER": user.pw_name,
        "XDG_RUNTIME_DIR": str(runtime),
        "CONTAINERS_CONF": str(conf),
        # the user's Podman keeps its images and settings here, not in the user's home
        "XDG_DATA_HOME": str(scratch / "data"),
        "XDG_CONFIG_HOME": str(scratch / "config"),
        "SIMPLETVM_HOME": str(work / "store"),
    }
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]

    def run(*command, timeout=600):
        return subprocess.run(
            [*as_user, *command],
            cwd=work,
            env=environ,
            text=True,
            capture_output=True,
            timeout=timeout,
        )

    try:
        for folder in (runtime, work, scratch / "data", scratch / "config"):
            folder.mkdir(mode=0o700)
            os.chown(folder, user.pw_uid, user.pw_gid)
        scratch.chmod(0o755)
        archive = scratch / "base.tar"
        engine(engine_env, "save", "--output", str(archive), base_image)
        archive.chmod(0o644)
        shutil.copy(engine_env["CONTAINERS_CONF"], conf)
        conf.chmod(0o644)
        loaded = run("podman", "load", "--quiet", "--input", str(archive))
        assert loaded.returncode == 0, loaded.stderr
        # slirp4netns may not open /dev/net/tun in a sandbox: the host's network here
        written = run(
            str(HELPER_PATH),  # as a user runs it: its #! finds the system's python3
            "--engine",
            "podman",
            "--image",
            base_image,
            "--engine-arg=--network=host",
            "--engine-arg=--entrypoint=touch",
            "--",
            "/tvm-benchmark/written",
            "/workspace/written",
        )
        assert written.returncode == 0, written.stdout + written.stderr
        assert (
            "--userns=keep-id"
            in run(str(HELPER_PATH), "--engine", "podman", "--print", "plan", "grid.yaml").stdout
        )
        for path in (work / "store" / "written", work / "written"):
            assert (path.stat().st_uid, path.stat().st_gid) == (user.pw_uid, user.pw_gid)
    finally:
        # rootless Podman leaves a process that holds its user namespace: end it
        pause = runtime / "libpod" / "tmp" / "pause.pid"
        if pause.is_file():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pause.read_text()), signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)

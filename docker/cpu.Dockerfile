# syntax=docker/dockerfile:1
# SimpleTVM for CPU targets; its entry point is superb:
#   docker build -f docker/cpu.Dockerfile -t simpletvm:cpu .
#   docker run --rm simpletvm:cpu plan /opt/simpletvm/examples/superb_mobilenet.yaml
# docker/simpletvm-docker runs it with the run store and the working directory mounted.
# Where no registry is reachable, docker/base-image.sh makes a Debian 12 base from
# Debian's archive, and BASE_IMAGE names it:
#   docker build --build-arg BASE_IMAGE=localhost/simpletvm-base:bookworm \
#       -f docker/cpu.Dockerfile -t simpletvm:cpu .

# pyproject.toml requires Python 3.11; Debian 12 is the Python image's stable base. Any
# Debian 12 image whose `python` is Python 3.11 with its venv module will do.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
FROM ${BASE_IMAGE}

# TVM links the modules it builds into shared libraries with the C++ compiler.
# This is the g++ metapackage of Debian 12, which stays at this version for the release.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++=4:12.2.0-3 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

# Installed the way the README installs it, `pip install .` into a virtual environment,
# so pyproject.toml stays the one list of dependencies. The cache mount keeps pip's
# downloads across rebuilds and out of the image. xgboost (MetaSchedule's cost model)
# depends on NVIDIA's NCCL, 470 MB that it loads only to train on GPUs: not on a CPU.
COPY . /opt/simpletvm
RUN --mount=type=cache,target=/root/.cache/pip \
    python -m venv /opt/venv \
    && /opt/venv/bin/pip install /opt/simpletvm \
    && /opt/venv/bin/pip uninstall --yes nvidia-nccl-cu12

# The helper runs the container as the caller's user id, which has no account here:
# the home folder is writable by anyone so that libraries can keep caches in it.
RUN useradd --no-log-init --create-home --uid 1000 simpletvm \
    && chmod 1777 /home/simpletvm \
    && install -d -o simpletvm -g simpletvm /tvm-benchmark /workspace
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/simpletvm \
    SIMPLETVM_HOME=/tvm-benchmark \
    PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /workspace
ENTRYPOINT ["superb"]

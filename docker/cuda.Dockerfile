# syntax=docker/dockerfile:1
# SimpleTVM for NVIDIA GPUs; its entry point is superb:
#   docker build -f docker/cuda.Dockerfile -t simpletvm:cuda .
#   docker run --rm --gpus all simpletvm:cuda plan /opt/simpletvm/examples/superb_mobilenet.yaml
# docker/simpletvm-docker --target cuda runs it with the run store and the working
# directory mounted. The host needs an NVIDIA driver for CUDA 13 (580 or newer) and the
# NVIDIA Container Toolkit.
#
# Where NVIDIA's registry is out of reach, PYTHON_STAGE=debian-python builds everything
# but CUDA (the compiler and Python of the stage below, the install, the user) on the
# Debian 12 base that docker/base-image.sh makes: an image that checks the install and
# runs CPU targets only.
#   docker build --build-arg BASE_IMAGE=localhost/simpletvm-base:bookworm \
#       --build-arg PYTHON_STAGE=debian-python -f docker/cuda.Dockerfile -t simpletvm:cuda-nocuda .

# The TVM wheel carries the CUDA runtime module, linked against libcudart.so.13 (and the
# driver's libcuda.so.1), so the base brings CUDA 13. It is the devel variant because
# TVM's CUDA modules hold CUDA C source that is compiled when a module is loaded on the
# GPU, and the compiler needs the toolkit's nvcc and headers.
ARG BASE_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04
# The stage that brings the C++ compiler and Python 3.11 in /opt/venv: cuda-python
# (NVIDIA's base), or debian-python (a Debian 12 base with Python 3.11, no CUDA).
ARG PYTHON_STAGE=cuda-python

FROM ghcr.io/astral-sh/uv:0.13.0 AS uv

FROM ${BASE_IMAGE} AS cuda-python
# TVM links the modules it builds into shared libraries with the C++ compiler.
# This is the g++ metapackage of Ubuntu 24.04, which stays at this version for the release.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++=4:13.2.0-7ubuntu1 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
# Ubuntu 24.04 ships Python 3.12 and pyproject.toml requires 3.11. uv installs a
# standalone CPython build (python-build-standalone) that needs only glibc, so it works
# on any base; the pinned uv and Python versions make it reproducible. A PPA is a third
# party with no update promise, and an interpreter copied from a python image expects
# that image's Debian libraries.
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PYTHON_INSTALL_DIR=/opt/python
RUN uv python install 3.11.14 \
    && "$(uv python find 3.11.14)" -m venv /opt/venv

FROM ${BASE_IMAGE} AS debian-python
# Debian 12's g++ metapackage, as in cpu.Dockerfile, and its Python 3.11
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++=4:12.2.0-3 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && python -m venv /opt/venv

FROM ${PYTHON_STAGE}
# Installed the way the README installs it, `pip install .` into a virtual environment,
# so pyproject.toml stays the one list of dependencies. The cache mount keeps pip's
# downloads across rebuilds and out of the image.
COPY . /opt/simpletvm
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/venv/bin/pip install /opt/simpletvm

# The helper runs the container as the caller's user id, which has no account here:
# the home folder is writable by anyone so that libraries can keep caches in it.
# Ubuntu's images hold a user "ubuntu" with the id 1000 that the cpu image gives simpletvm.
RUN if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
    && useradd --no-log-init --create-home --uid 1000 simpletvm \
    && chmod 1777 /home/simpletvm \
    && install -d -o simpletvm -g simpletvm /tvm-benchmark /workspace
# TVM compiles CUDA source with NVRTC through the cuda-bindings package by default;
# nvcc from the toolkit does the same without another dependency.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/simpletvm \
    SIMPLETVM_HOME=/tvm-benchmark \
    TVM_CUDA_COMPILE_MODE=nvcc \
    PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /workspace
ENTRYPOINT ["superb"]

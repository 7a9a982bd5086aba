"""What the commands on one model share: the model's import options and remote target
read from their options, and the session a command works in (a console, its run and its
SimpleTVM)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from simpletvm.cli.guard import active_contexts, refuse
from simpletvm.console import make_console


def remote_target(tracker: str | None, device_key: str | None) -> tuple[str, int] | None:
    """``--tracker HOST:PORT --device-key KEY`` -> ``(host, port)`` once the tracker is
    reached and has a server of KEY; None without ``--tracker``. Exits 2 naming the fix."""
    if tracker is None:
        if device_key is not None:
            raise typer.BadParameter(
                "a device key needs --tracker HOST:PORT, the RPC tracker its servers register with",
                param_hint="--device-key",
            )
        return None
    host, _, port = tracker.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter(
            f"{tracker!r} is not HOST:PORT (e.g. 127.0.0.1:9190)", param_hint="--tracker"
        )
    if not device_key:
        raise typer.BadParameter(
            "give --device-key KEY, the key the target's RPC servers "
            "register under (python -m tvm.exec.query_rpc_tracker "
            f"--host {host} --port {port} lists them)",
            param_hint="--device-key",
        )
    from simpletvm.errors import SimpleTVMError
    from simpletvm.remote.rpc import require_servers

    try:
        require_servers(host, int(port), device_key)
    except SimpleTVMError as error:
        message = str(error).replace("or leave rpc_tracker unset", "or leave out --tracker")
        raise refuse(make_console(stderr=True), SimpleTVMError(message)) from error
    return host, int(port)


def where(device: dict) -> str:
    """Where a step ran, from its ``device`` record."""
    if device.get("runner") != "rpc":
        return "this machine"
    host, port = device["server"]
    return f"RPC server {host}:{port} (key {device['device_key']})"


def _input_shapes(values: list[str]) -> dict[str, list[int]] | None:
    """``["x:1,3,32,32"]`` -> ``{"x": [1, 3, 32, 32]}``; ``["1,3,32,32"]`` -> ``{"": ...}``."""
    shapes = {}
    for value in values:
        name, _, dims = value.rpartition(":")
        try:
            shapes[name] = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()]
        except ValueError:
            raise typer.BadParameter(
                f"{value!r} is not NAME:1,224,224,3 or 1,224,224,3", param_hint="--input-shape"
            ) from None
    if "" in shapes and len(shapes) > 1:
        raise typer.BadParameter(
            "give every shape a NAME: when there are several", param_hint="--input-shape"
        )
    return shapes or None


def model_options(model: str, input_shape: list[str], image_size: int | None) -> dict:
    """The import options ``--input-shape`` and ``--image-size`` give ``from_model``."""
    options: dict = {}
    if image_size is not None:
        from simpletvm.models import detect_format

        try:
            fmt = detect_format(model)
        except Exception:  # noqa: BLE001 - the import names what is wrong with MODEL
            fmt = None
        if fmt is not None and fmt != "builtin":
            raise typer.BadParameter(
                f"applies to built-in models only (mobilenet, "
                f"mobilenetv2, resnet18, resnet50); {model} is a {fmt} "
                "model: leave --image-size out (--input-shape sets "
                "its unknown dimensions)",
                param_hint="--image-size",
            )
    shapes = _input_shapes(input_shape)
    if shapes:
        options["input_shapes"] = shapes.get("") if list(shapes) == [""] else shapes
    if image_size is not None:
        options["image_size"] = image_size
    return options


def session(
    store: Path | None,
    target: str = "cpu",
    log_tasks: bool = False,
    tracker: tuple[str, int] | None = None,
    device_key: str | None = None,
    *,
    kind: str,
    threads: int | None = None,
):
    """A console, the command's run (of ``kind``: the command's name) and its SimpleTVM."""
    from rich.logging import RichHandler

    from simpletvm import BenchmarkingContext, SimpleTVM

    console = make_console()
    ctx = BenchmarkingContext(target, store=store, device_key=device_key, num_threads=threads)
    ctx.kind = kind
    active_contexts.append(ctx)
    if log_tasks:
        handler = RichHandler(console=console, show_path=False, show_time=False)
        handler.setLevel(logging.INFO)
        ctx.logger.addHandler(handler)
    return console, ctx, SimpleTVM(ctx, rpc_tracker=tracker)

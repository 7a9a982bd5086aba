"""Tuning records made like real ones, in any number: MetaSchedule design-space traces of
ResNet-18's convolutions (NHWC, this host's target) as templates, each copied with a
random measurement of its own."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

# (N, H=W, C_in, C_out, kernel, stride): ResNet-18's convolutions at 224x224, NHWC
RESNET18_CONVS = [
    (1, 224, 3, 64, 7, 2),
    (1, 56, 64, 64, 3, 1),
    (1, 56, 64, 128, 3, 2),
    (1, 56, 64, 128, 1, 2),
    (1, 28, 128, 128, 3, 1),
    (1, 28, 128, 256, 3, 2),
    (1, 28, 128, 256, 1, 2),
    (1, 14, 256, 256, 3, 1),
    (1, 14, 256, 512, 3, 2),
    (1, 14, 256, 512, 1, 2),
    (1, 7, 512, 512, 3, 1),
]


TEMPLATES_SCRIPT = textwrap.dedent("""
    import json, sys
    import tvm
    from tvm import te, topi
    from tvm.s_tir import meta_schedule as ms
    sys.path.insert(0, sys.argv[2])
    from simpletvm.targets import load_tensor_intrinsics, resolve_target
    from simpletvm.tuning.database import record_as_json

    target = resolve_target("cpu")
    load_tensor_intrinsics(target.kind)
    templates = []
    for n, size, cin, cout, kernel, stride in json.loads(sys.argv[3]):
        for epilogue in ("relu", "add_relu"):
            data = te.placeholder((n, size, size, cin), name="data")
            weight = te.placeholder((kernel, kernel, cin, cout), name="weight")
            conv = topi.nn.conv2d_nhwc(data, weight, stride, kernel // 2, 1)
            bias = te.placeholder((cout,), name="bias")
            args = [data, weight, bias]
            conv = topi.add(conv, bias)
            if epilogue == "add_relu":
                residual = te.placeholder(conv.shape, name="residual")
                conv, args = topi.add(conv, residual), args + [residual]
            out = topi.nn.relu(conv)
            func = te.create_prim_func(args + [out]).with_attr("layout_free_buffers", [1])
            mod = tvm.IRModule({"main": func})  # weights layout-free, as the project fuses
            context = ms.TuneContext(mod=mod, target=target.tvm_target(),
                                     space_generator="post-order-apply", num_threads=1,
                                     search_strategy=ms.search_strategy.ReplayTrace(),
                                     rand_state=len(templates))
            context.pre_tuning(max_trials=1, num_trials_per_iter=1,
                               database=ms.database.MemoryDatabase(),
                               cost_model=ms.cost_model.RandomModel())
            candidate = context.search_strategy.generate_measure_candidates()[0]
            workload = ms.database.Workload(mod)
            record = ms.database.TuningRecord(
                candidate.sch.trace, workload, [1e-3], target.tvm_target(),
                ms.arg_info.ArgInfo.from_prim_func(mod["main"]))
            templates.append({"workload": str(workload.as_json()[0]),
                              "workload_json": list(workload.as_json()),
                              "record": record_as_json(record)})
    json.dump(templates, open(sys.argv[1], "w"))
""")


def make_templates(path: Path, count: int) -> list[dict]:
    """``count`` real records of ResNet-18-like workloads, kept at ``path`` (made once, in a
    process of their own, so that the caller never loads TVM before it forks)."""
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                "-c",
                TEMPLATES_SCRIPT,
                str(path),
                str(Path(__file__).resolve().parents[2]),
                json.dumps(RESNET18_CONVS),
            ],
            check=True,
        )
    return json.loads(path.read_text())[:count]


def workload_keys(templates: list[dict], total: int) -> list[tuple[str, dict]]:
    """The job's workloads first, then others (copies under other keys) up to ``total``."""
    keys = [(t["workload"], t) for t in templates]
    for index in range(len(templates), total):
        keys.append((f"other-{index}", templates[index % len(templates)]))
    return keys


def synthetic(template: dict, rng: random.Random) -> list:
    """A record like ``template``'s, with a measurement of its own."""
    trace, _, target, args = template["record"]
    latency = rng.uniform(1e-4, 1e-2)
    return [trace, [latency * rng.uniform(0.98, 1.02) for _ in range(5)], target, args]

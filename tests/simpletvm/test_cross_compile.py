"""A target for another CPU builds here and is linked by a cross compiler, or says which
compiler is missing and how to get it."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from simpletvm import BenchmarkingContext, SimpleTVM, SimpleTVMError
from simpletvm.targets import resolve_target

AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon"
EM_AARCH64 = 183  # ELF e_machine


def elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return struct.unpack("<H", header[18:20])[0]


@pytest.fixture
def arm_build(store, tiny_onnx):
    return (
        SimpleTVM(BenchmarkingContext(AARCH64, store=store))
        .from_model(tiny_onnx)
        .build(records=None)
    )


def test_a_target_string_for_another_cpu_is_a_cross_target():
    target = resolve_target(AARCH64)
    assert target.spec == {
        "kind": "llvm",
        "mtriple": "aarch64-linux-gnu",
        "mcpu": "cortex-a72",
        "mattr": ["+neon"],
    }
    assert target.cross_triple == "aarch64-linux-gnu" and not target.runs_here
    assert resolve_target("cpu").runs_here
    with pytest.raises(SimpleTVMError, match="options look like -key=value"):
        resolve_target("llvm -mtriple")


def test_a_target_strings_integer_options_are_integers_tvm_accepts():
    import tvm

    target = resolve_target("llvm -mcpu=znver3 -num-cores=2")
    assert target.spec == {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}
    assert int(tvm.target.Target(target.spec).attrs["num-cores"]) == 2


@pytest.mark.skipif(
    not shutil.which("aarch64-linux-gnu-g++"),
    reason="no aarch64 cross compiler (apt-get install g++-aarch64-linux-gnu)",
)
def test_save_links_an_aarch64_library_with_the_installed_cross_compiler(arm_build):
    arm_build.save()
    module = Path(arm_build.context.artifacts["module"]) / "model.so"
    assert elf_machine(module) == EM_AARCH64


def test_save_uses_the_compiler_named_by_the_environment(arm_build, tmp_path, monkeypatch):
    """A stand-in compiler keeps the objects it is given: they are aarch64 code."""
    kept = tmp_path / "objects"
    kept.mkdir()
    compiler = tmp_path / "fake-cc"
    compiler.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/args\n'
        "while [ $# -gt 0 ]; do\n"
        '  case "$1" in -o) shift; out="$1";; *.o) cp "$1" '
        f"{kept}/;; esac; shift\n"
        "done\n"
        'echo fake > "$out"\n'
    )
    compiler.chmod(0o755)
    monkeypatch.setenv("SIMPLETVM_CROSS_CC", f"{compiler} --sysroot=/opt/arm")
    arm_build.save()
    args = (tmp_path / "args").read_text().split()
    assert "-shared" in args and "--sysroot=/opt/arm" in args
    objects = list(kept.glob("*.o"))
    assert objects and {elf_machine(o) for o in objects} == {EM_AARCH64}


def test_without_a_cross_compiler_save_names_it_and_how_to_install_it(
    arm_build, tmp_path, monkeypatch
):
    monkeypatch.delenv("SIMPLETVM_CROSS_CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler at all
    with pytest.raises(
        SimpleTVMError,
        match=r"aarch64-linux-gnu-g\+\+, aarch64-linux-gnu-gcc"
        r".*apt-get install g\+\+-aarch64-linux-gnu"
        r".*SIMPLETVM_CROSS_CC",
    ):
        arm_build.save()
    assert arm_build.context.steps[-1]["status"] == "error"


def test_a_cross_compiler_named_but_not_installed_is_named(arm_build, monkeypatch):
    monkeypatch.setenv("SIMPLETVM_CROSS_CC", "/nonexistent/aarch64-cc -O2")
    with pytest.raises(
        SimpleTVMError, match="names '/nonexistent/aarch64-cc', which is not installed"
    ):
        arm_build.save()


def test_code_for_another_cpu_runs_only_through_a_tracker(arm_build):
    with pytest.raises(SimpleTVMError, match=r"another CPU \(aarch64-linux-gnu\).*rpc_tracker"):
        arm_build.evaluate(repeat=1)

"""The CPU-side parts of tests/gpu/pack_sglang.sh (the SGLang layer set for the lent GPU machine): its wheel list agrees
with requirements/gpu-sglang.txt, its sm_90 pruning zeroes exactly the other GPUs' kernels, and its `env` adds a spare
only where the machine lacks the module."""

import os
import re
import struct
import subprocess

from verl_recipes.catalog import REPO

SCRIPT = REPO / "tests" / "gpu" / "pack_sglang.sh"
MAGIC = 0xBA55ED50


def run(*args, env=None):
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def pack_list():
    rows = [line.split() for line in run("list").splitlines()]
    return {norm(spec.split("==")[0]): (layer, spec.split("==")[1]) for layer, spec in rows}


def test_list_is_well_formed_and_has_each_package_once():
    lines = run("list").splitlines()
    assert all(re.fullmatch(r"[GZ] [A-Za-z0-9_.]+==\S+", line) for line in lines), lines
    names = [norm(line.split()[1].split("==")[0]) for line in lines]
    assert len(names) == len(set(names))


def test_list_carries_the_versions_the_requirements_pin():
    carried = pack_list()
    text = (REPO / "requirements" / "gpu-sglang.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", text, re.M))
    shared = {norm(n): v for n, v in pins.items() if norm(n) in carried}
    assert {"sglang_kernel", "flashinfer_python", "xgrammar", "kernels"} <= set(shared)
    assert all(carried[n][1] == v for n, v in shared.items()), {n: (carried[n][1], v) for n, v in shared.items()}
    # sglang itself is installed without its dependencies, as the file's header says
    assert re.search(r"pip install --no-deps sglang==(\S+)", text).group(1) == carried["sglang"][1]


def elf_with_fatbin(blobs):
    """A minimal ELF64 whose .nv_fatbin section holds the given fatbins, each a list of (kind, arch, payload)."""
    fat = b""
    for entries in blobs:
        body = b""
        for kind, arch, payload in entries:
            head = bytearray(64)
            struct.pack_into("<HHIQ", head, 0, kind, 0, 64, len(payload))
            struct.pack_into("<I", head, 28, arch)
            body += bytes(head) + payload
        fat += struct.pack("<IHHQ", MAGIC, 1, 16, len(body)) + body
    names = b"\0.shstrtab\0.nv_fatbin\0"
    data_off = 64
    fat_off = data_off + len(names)
    fat_off += -fat_off % 8
    sh_off = fat_off + len(fat)
    ehdr = bytearray(64)
    ehdr[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<Q", ehdr, 0x28, sh_off)
    struct.pack_into("<HHH", ehdr, 0x3A, 64, 3, 1)
    sections = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sections += struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, data_off, len(names), 0, 0, 1, 0)
    sections += struct.pack("<IIQQQQIIQQ", 11, 1, 0, 0, fat_off, len(fat), 0, 0, 8, 0)
    out = bytes(ehdr) + names
    return out + bytes(fat_off - len(out)) + fat + sections, fat_off


def test_prune_keeps_sm90_cubins_or_else_the_ptx_the_driver_can_compile(tmp_path):
    a, b, c, d = b"\xaa" * 32, b"\xbb" * 48, b"\xcc" * 16, b"\xdd" * 40
    # one fatbin with an sm_90 cubin beside sm_80's; one without, whose compute_80 PTX sm_90 can still load
    elf, fat_off = elf_with_fatbin([[(2, 80, a), (2, 90, b)], [(1, 80, c), (2, 100, d)]])
    lib = tmp_path / "lib.so"
    lib.write_bytes(elf)
    run("prune", str(lib))
    out = lib.read_bytes()
    assert len(out) == len(elf)
    payload = lambda first, n: out[fat_off + first : fat_off + first + n]  # noqa: E731
    first = 16 + 64  # the first fatbin's header, then its first entry's header
    assert payload(first, 32) == bytes(32)  # sm_80 cubin zeroed
    assert payload(first + 32 + 64, 48) == b
    second = 16 + 64 + 32 + 64 + 48 + 16 + 64
    assert payload(second, 16) == c  # PTX kept where no sm_90 cubin exists
    assert payload(second + 16 + 64, 40) == bytes(40)  # sm_100 cubin zeroed
    assert out[:fat_off] == elf[:fat_off] and out[-192:] == elf[-192:]


def test_env_adds_only_the_spares_the_machine_lacks(tmp_path):
    sgl, kit = tmp_path / "sgl" / "root" / "layers", tmp_path / "gpu" / "root" / "layers"
    for layer in ("G", "Z/json", "Z/nosuch"):
        (sgl / layer).mkdir(parents=True)
    for layer in "TRSX":
        (kit / layer).mkdir(parents=True)
    (sgl / "Z" / "MAP").write_text("json json\nno_such_module_for_this_test nosuch\n")
    env = {**os.environ, "SGLANG_HOME": str(tmp_path / "sgl"), "GPU_KIT": str(tmp_path / "gpu"), "PYTHONPATH": "/mine"}
    line = next(x for x in run("env", env=env).splitlines() if x.startswith("export PYTHONPATH="))
    path = line.split("=", 1)[1].split(":")
    assert path == ["/mine", str(sgl / "G"), *(str(kit / layer) for layer in "TRSX"), str(sgl / "Z" / "nosuch")]

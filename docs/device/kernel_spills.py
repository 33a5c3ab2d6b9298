#!/usr/bin/env python3
"""Registers and spills of the kernels, without a GPU: compiles one module's sources to an
sm_90 cubin with pip's NVRTC (nvidia-cuda-nvrtc, what CI installs) and prints ptxas's
report for each entry point (and each function it calls out of line).

    python3 docs/device/kernel_spills.py                        # production, u64 keys, u32 indices
    python3 docs/device/kernel_spills.py --kernels merge_kway --define INDEX_BITS=64
    python3 docs/device/kernel_spills.py --sources .gpu/src-base --family sort
    python3 docs/device/kernel_spills.py --cubin /tmp/m.cubin   # then: cuobjdump -sass /tmp/m.cubin

The defines are the sm_90 policy's for u64 keys (src/engine/gpu/tuning.rs) unless
overridden; the file lists are src/engine/gpu/manifest.rs's (`Family::source_files`).
Runs here, on the dev VM: no GPU, no pack; needs `pip install nvidia-cuda-nvrtc==13.0.88`
(what CI installs). Found spills that cost 5-10% of a kernel's time before it ever ran on a
GPU (the k-way kernel's packed rounds: docs/log/2026-12-performance-log.md, stop 51); its
--cubin showed a refactor of that kernel compiling to the same SASS (stop 54). Keep
FAMILIES and POLICY in step with manifest.rs and tuning.rs's sm90().
"""
import argparse
import ctypes
import os
import subprocess
import sys

FAMILIES = {
    "production": ["common.cuh", "cta_merge.cuh", "co_rank.cuh", "merge_tiled.cu", "merge_kway.cu", "partition.cu", "rebase.cu"],
    "book": ["common.cuh", "cta_merge.cuh", "co_rank.cuh", "merge_basic.cu", "merge_circular.cu"],
    "gather": ["common.cuh", "gather.cu"],
    "sort": ["common.cuh", "cta_merge.cuh", "co_rank.cuh", "sort_tiles.cu"],
}
POLICY = dict(KEY_WORDS=1, KEY_WORD_BITS=64, INDEX_BITS=32, THREADS=256, IPT_BASIC=4, IPT_TILED=15, IPT_CIRC=4,
              CIRC_SLOTS=1024, CIRC_TILES=8, IPT_KWAY=17, KWAY_MIN_BLOCKS=4, KWAY_COARSE=16, TILED_MIN_BLOCKS=4,
              IPT_SORT=16, TILED_NARROW=0, NARROW_TIE_THREADS=32)


def nvrtc_lib_dir():
    out = subprocess.check_output([sys.executable, "-m", "pip", "show", "nvidia-cuda-nvrtc"], text=True)
    loc = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("Location:"))
    return os.path.join(loc, "nvidia", "cu13", "lib")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", default="cuda", help="directory of the kernel sources (default cuda/)")
    ap.add_argument("--family", default="production", choices=sorted(FAMILIES))
    ap.add_argument("--define", action="append", default=[], help="NAME=VALUE over the policy's defines")
    ap.add_argument("--kernels", default="", help="comma-separated entry points to report (default all)")
    ap.add_argument("--cubin", default="", help="also write the cubin there (for `cuobjdump -sass`: pip's nvidia-cuda-cuobjdump)")
    args = ap.parse_args()
    defines = dict(POLICY)
    for d in args.define:
        name, value = d.split("=", 1)
        defines[name] = int(value)
    header = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    source = header + "\n".join(open(os.path.join(args.sources, f)).read() for f in FAMILIES[args.family])
    lib = nvrtc_lib_dir()
    # libnvrtc loads its builtins library by name: its directory must be on the search path.
    if lib not in os.environ.get("LD_LIBRARY_PATH", ""):
        os.environ["LD_LIBRARY_PATH"] = lib + ":" + os.environ.get("LD_LIBRARY_PATH", "")
        os.execv(sys.executable, [sys.executable] + sys.argv)
    nvrtc = ctypes.CDLL(os.path.join(lib, "libnvrtc.so.13"))
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"module.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    opts = [b"--gpu-architecture=sm_90", b"--std=c++17", b"--ptxas-options=-v"]
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if rc == 0 and args.cubin:
        nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        with open(args.cubin, "wb") as f:
            f.write(cubin.raw)
    wanted = set(filter(None, args.kernels.split(",")))
    current = None
    for line in log.value.decode().splitlines():
        if "error" in line:
            print(line)
        if "Compiling entry function" in line:
            current = line.split("'")[1]
        if current and (not wanted or current in wanted) and ("entry" in line or "spill" in line or "Used" in line or "properties" in line):
            print(line.replace("ptxas info    : ", "").replace("ptxas         .     ", "    "))
    sys.exit(0 if rc == 0 else 1)


if __name__ == "__main__":
    main()

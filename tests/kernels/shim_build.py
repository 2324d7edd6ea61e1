"""Build the host-shim shared library: chute/kernels/resize_normalize.cu compiled as C++."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import chute.kernels

SHIM_DIR = Path(__file__).parent / "shim"
KERNEL_DIR = Path(chute.kernels.__file__).parent


def build_shim(out_dir: Path) -> ctypes.CDLL:
    """Compile shim/driver.cpp (which #includes the kernel source) and load it with ctypes.

    Raises FileNotFoundError when no C++ compiler is on PATH.
    """
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        raise FileNotFoundError("no C++ compiler (g++, c++ or clang++) on PATH")
    lib_path = out_dir / "libchute_kernel_shim.so"
    cmd = [
        cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-Wall", "-Werror",
        f"-I{SHIM_DIR}", f"-I{KERNEL_DIR}", str(SHIM_DIR / "driver.cpp"), "-o", str(lib_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"host shim build failed:\n{' '.join(cmd)}\n{proc.stderr}")
    lib = ctypes.CDLL(str(lib_path))
    ptr = ctypes.c_void_p
    lib.run_kernel.argtypes = [ctypes.c_char_p, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr,
                               ctypes.c_int, ctypes.c_int]
    lib.run_kernel.restype = ctypes.c_int
    lib.run_views_kernel.argtypes = [ctypes.c_char_p, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr,
                                     ptr, ctypes.c_int]
    lib.run_views_kernel.restype = ctypes.c_int
    lib.floats_to_half_bits.argtypes = [ptr, ptr, ctypes.c_long]
    lib.floats_to_half_bits.restype = None
    return lib

"""Compile checks of chute/kernels/*.cu for sm_80 and sm_90 without a GPU: NVRTC through
cuda-python (what CuPy uses at run time) and nvcc when it is on PATH."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess

import numpy as np
import pytest

from chute.kernels import kernel_name, kernel_source, views_kernel_name
from chute.kernels._launch import _NVRTC_OPTIONS

ARCHS = ["sm_80", "sm_90"]
ENTRY_POINTS = sorted(
    name(dtype, layout)
    for dtype, layout in itertools.product([np.uint8, np.float16, np.float32], ["NCHW", "NHWC"])
    for name in (kernel_name, views_kernel_name)  # one view, and multi-crop views
)


def _nvrtc():
    """cuda.bindings.nvrtc with a loadable libnvrtc, or a skip saying what is missing."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        pytest.skip(f"cuda-python (cuda-bindings) is not installed: {exc}")
    try:  # libnvrtc is loaded lazily (found in the nvidia-cuda-nvrtc wheel or the CUDA toolkit)
        err, *_ = nvrtc.nvrtcVersion()
    except Exception as exc:  # any loader failure means "no NVRTC here"
        pytest.skip(f"libnvrtc could not be loaded: {exc}")
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        pytest.skip(f"libnvrtc is unusable: {err}")
    return nvrtc


def _entry_points(ptx: str) -> list[str]:
    return sorted(re.findall(r"\.entry\s+(\w+)", ptx))


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("arch", ARCHS)
def test_nvrtc_compiles_kernel(arch):
    """Exactly the launcher's options (plus the architecture and CuPy's default execution
    space): no include path, as CuPy >= 13.6 ships no cuda_fp16.h and NVRTC has none built in."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(kernel_source().encode(), b"resize_normalize.cu",
                                         0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"--device-as-default-execution-space",
                   *(o.encode() for o in _NVRTC_OPTIONS)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        _, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * log_size
        nvrtc.nvrtcGetProgramLog(prog, log)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")
        _, ptx_size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * ptx_size
        nvrtc.nvrtcGetPTX(prog, ptx)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    ptx = ptx.decode(errors="replace")
    assert _entry_points(ptx) == ENTRY_POINTS
    assert "cvt.rn.f16.f32" in ptx  # the fp16 store rounds to nearest even


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_nvcc_compiles_kernel(arch, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH (the NVRTC test covers the compile check)")
    source = tmp_path / "resize_normalize.cu"
    source.write_text(kernel_source())
    ptx = tmp_path / "resize_normalize.ptx"
    proc = subprocess.run([nvcc, "-ptx", f"-arch={arch}", "-std=c++17", str(source), "-o",
                           str(ptx)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert _entry_points(ptx.read_text()) == ENTRY_POINTS

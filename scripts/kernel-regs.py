#!/usr/bin/env python3
"""Registers, spills and shared memory per kernel of one kernels/*.cu file,
as ptxas reports them for sm_90 through NVRTC (no GPU needed):
  LD_LIBRARY_PATH=<nvidia-cuda-nvrtc wheel>/nvidia/cu13/lib scripts/kernel-regs.py gcm.cu
"""
import ctypes, os, re, sys
lib = ctypes.CDLL('libnvrtc.so.13')   # LD_LIBRARY_PATH: the nvidia-cuda-nvrtc wheel's lib
K = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crates', 'accel', 'kernels') + '/'
name = sys.argv[1]
src = open(K + name).read()
hdr = open(K + 'aes_core.cuh').read()
prog = ctypes.c_void_p()
hdrs = (ctypes.c_char_p * 1)(hdr.encode()); hn = (ctypes.c_char_p * 1)(b'aes_core.cuh')
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 1, hdrs, hn) == 0
opts = [b'-arch=sm_90', b'--ptxas-options=-v', b'-std=c++17']
arr = (ctypes.c_char_p * len(opts))(*opts)
r = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, buf)
log = buf.value.decode()
cur = None
for line in log.splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m: cur = m.group(1)
    if 'registers' in line or 'spill' in line: print(cur, line.strip()[:150])
print('rc', r)
if r: print(log[-3000:])

#!/usr/bin/env python3
"""Registers, spills and shared memory per kernel of kernels/*.cu files, as
ptxas reports them for one architecture through NVRTC (no GPU needed):

  LD_LIBRARY_PATH=<nvidia-cuda-nvrtc wheel>/nvidia/cu13/lib scripts/kernel-regs.py gcm.cu [blake3.cu ...]

The wheel is the one .ci/run installs (nvidia-cuda-nvrtc==13.0.88); every
kernels/*.cuh is offered as an include. ARCH (default sm_90) picks the target.
"""
import ctypes, glob, os, re, sys

K = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crates', 'accel', 'kernels')


def compile_log(lib, name, arch):
    src = open(os.path.join(K, name)).read()
    headers = sorted(glob.glob(os.path.join(K, '*.cuh')))
    bodies = (ctypes.c_char_p * len(headers))(*[open(h).read().encode() for h in headers])
    names = (ctypes.c_char_p * len(headers))(*[os.path.basename(h).encode() for h in headers])
    prog = ctypes.c_void_p()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), len(headers), bodies, names)
    if r:
        sys.exit(f'{name}: nvrtcCreateProgram failed ({r})')
    opts = [f'-arch={arch}'.encode(), b'--ptxas-options=-v', b'-std=c++17']
    r = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return r, buf.value.decode(errors='replace')


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        lib = ctypes.CDLL('libnvrtc.so.13')
    except OSError as e:
        sys.exit(f'{e}: put the nvidia-cuda-nvrtc wheel\'s lib directory on LD_LIBRARY_PATH')
    arch = os.environ.get('ARCH', 'sm_90')
    status = 0
    for name in sys.argv[1:]:
        r, log = compile_log(lib, name, arch)
        kernel = None
        for line in log.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'", line)
            if m:
                kernel = m.group(1)
            if 'registers' in line or 'spill' in line:
                print(name, kernel, line.strip()[:150])
        if r:
            print(f'{name}: compile failed ({r})\n{log[-3000:]}')
            status = 1
    sys.exit(status)


if __name__ == '__main__':
    main()

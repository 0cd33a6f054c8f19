#!/usr/bin/env python3
"""Write the kernel sources as one C++ header the CPU emulation (shim.h) compiles: the
common header's CUDA include dropped, dynamic shared memory pointed at the emulator's
buffer, `extern "C"` removed. (The programmatic-launch asm sits behind `__CUDA_ARCH__`,
which the emulation leaves undefined.)

usage: prep.py OUT_HEADER KERNEL_FILE...   (paths relative to kernels/)
"""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels")


def main():
    out_path, files = sys.argv[1], sys.argv[2:]
    out = ['#include "shim.h"']
    for name in ["common.cuh"] + files:
        with open(os.path.join(ROOT, name)) as f:
            text = f.read()
        text = text.replace("#include <cuda_bf16.h>", "")
        text = text.replace("extern __shared__ float smem[];", "float* smem = g_smem;")
        out.append(f'#line 1 "kernels/{name}"')
        out.append(text.replace('extern "C" ', ""))
    with open(out_path, "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()

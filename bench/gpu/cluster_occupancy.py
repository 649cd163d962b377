#!/usr/bin/env python3
"""Issue 18 (session 30): how many CTAs and thread-block clusters of an evo kernel the GPU holds at
once, from the CUDA driver's occupancy calculator (cuOccupancyMaxActiveBlocksPerMultiprocessor,
cuOccupancyMaxActiveClusters), against what the launch asks for.

Input: the JSON of `evo --json compile -c CONFIG -g GENOME --out DIR` (one file per genome; the
variants' CUBINs are in DIR, named <hash>.<spec>.cubin) for the config's first shape. Per variant:
registers, dynamic shared memory, CTAs a launch asks for, CTAs per SM, clusters in flight at
most, clusters the launch asks for and the waves that makes.

Usage: python3 bench/gpu/cluster_occupancy.py --cubins DIR [--name NAME=HASH ...] JSON...
"""

import argparse
import ctypes
import json
import math
import sys
from pathlib import Path


class LaunchConfig(ctypes.Structure):
    # cuda.h's CUlaunchConfig.
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


class Driver:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        sms = ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                   "cuDeviceGetAttribute")
        self.sms = sms.value
        name = ctypes.create_string_buffer(128)
        self.check(self.lib.cuDeviceGetName(name, 128, dev), "cuDeviceGetName")
        self.name = name.value.decode()

    def check(self, rc, what):
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(text))
            raise RuntimeError(f"{what}: {text.value.decode() if text.value else rc}")

    def function(self, cubin: bytes, name: str):
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)), "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(func), module, name.encode()), "cuModuleGetFunction")
        return func

    def attribute(self, func, attr):
        v = ctypes.c_int()
        self.check(self.lib.cuFuncGetAttribute(ctypes.byref(v), attr, func), "cuFuncGetAttribute")
        return v.value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cubins", required=True, type=Path)
    ap.add_argument("--name", action="append", default=[], help="NAME=HASH: a genome's name in the table")
    ap.add_argument("json", nargs="+", type=Path)
    args = ap.parse_args()
    names = {h: n for n, h in (x.split("=", 1) for x in args.name)}
    d = Driver()
    print(f"{d.name}, {d.sms} SMs")
    print(f"{'genome':16} {'spec':36} {'regs':>4} {'smem KiB':>8} {'cluster':>7} {'CTAs':>5} {'CTAs/SM':>7} "
          f"{'clusters':>8} {'max clusters':>12} {'waves':>6}")
    for path in args.json:
        for v in json.loads(path.read_text()):
            if not v.get("success"):
                continue
            spec = v["spec"]
            cubin = args.cubins / f"{v['hash']}.{spec.replace('=', '-').replace(',', '_')}.cubin"
            if not cubin.exists():
                continue
            (kernel, launch), = v["launch"]
            grid, block, smem = launch["grid"], launch["block"], launch["shared_bytes"]
            func = d.function(cubin.read_bytes(), kernel)
            d.check(d.lib.cuFuncSetAttribute(func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                    "cuFuncSetAttribute")
            width = max(1, d.attribute(func, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH))
            per_sm = ctypes.c_int()
            d.check(d.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(per_sm), func, block[0] * block[1] * block[2],
                                                                      ctypes.c_size_t(smem)),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            cfg = LaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, None, None, 0)
            clusters = ctypes.c_int()
            d.check(d.lib.cuOccupancyMaxActiveClusters(ctypes.byref(clusters), func, ctypes.byref(cfg)),
                    "cuOccupancyMaxActiveClusters")
            ctas = grid[0] * grid[1] * grid[2]
            need = ctas // width
            regs = v["kernels"][0]["registers"]
            print(f"{names.get(v['hash'][:8], v['hash'][:8]):16} {spec:36} {regs:>4} {smem / 1024:>8.1f} {width:>7} "
                  f"{ctas:>5} {per_sm.value:>7} {need:>8} {clusters.value:>12} "
                  f"{math.ceil(need / clusters.value) if clusters.value else 'n/a':>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

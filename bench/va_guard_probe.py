"""Probe for docs/facts.md §22: can [0x302000000, +RES_MIB) still be reserved with
cuMemAddressReserve under compute-sanitizer, whose own reservation lands there in cuInit?

    compute-sanitizer --tool memcheck python3 bench/va_guard_probe.py      # as the tool sees it
    HOLD=1 ...   an 8 GiB PROT_NONE placeholder over the range, unmapped before the reserve
    PH=-2:2,2048:2 ...   guards (MiB offset from 0x302000000 : MiB size) kept in place
Prints the host mappings near the range after each step and where the reserve landed.
"""
import ctypes
import os
import sys
BASE = 0x302000000
SIZE = int(sys.argv[1]) << 30 if len(sys.argv) > 1 else 8 << 30
HOLD = os.environ.get("HOLD", "0") == "1"
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_PRIVATE, MAP_ANON, MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000
def maps(tag):
    lines = []
    for l in open("/proc/self/maps"):
        a, b = (int(x, 16) for x in l.split()[0].split("-"))
        if b > BASE - (1 << 30) and a < BASE + (300 << 30):
            lines.append(f"  {a:#x}-{b:#x} ({(b-a)/(1<<30):.2f} GiB) {l.split()[1]}")
    print(tag, *(lines or ["  (nothing near)"]), sep="\n", flush=True)
maps("start:")
if HOLD:
    p = libc.mmap(BASE, SIZE, 0, MAP_PRIVATE | MAP_ANON | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0)
    print("placeholder", hex(p or 0), "errno", ctypes.get_errno(), flush=True)
for spec in filter(None, os.environ.get("PH", "").split(",")):
    off, size = (int(x) for x in spec.split(":"))  # MiB relative to BASE, MiB
    p = libc.mmap(BASE + (off << 20), size << 20, 0, MAP_PRIVATE | MAP_ANON | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0)
    print("guard", hex(p or 0), "errno", ctypes.get_errno(), flush=True)
RES = int(os.environ.get("RES_MIB", "2048")) << 20
cu = ctypes.CDLL("libcuda.so.1")
def ck(r, what):
    if r: print(what, "->", r, flush=True); sys.exit(1)
ck(cu.cuInit(0), "cuInit"); maps("after cuInit:")
dev = ctypes.c_int(); ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "dev")
ctx = ctypes.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
ck(cu.cuCtxSetCurrent(ctx), "setcurrent"); maps("after context:")
d = ctypes.c_uint64(); ck(cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(1 << 20)), "alloc")
print("cuMemAlloc ->", hex(d.value)); maps("after cuMemAlloc:")
if HOLD:
    print("munmap", libc.munmap(BASE, SIZE))
got = ctypes.c_uint64()
r = cu.cuMemAddressReserve(ctypes.byref(got), ctypes.c_size_t(RES), ctypes.c_size_t(0), ctypes.c_uint64(BASE), ctypes.c_ulonglong(0))
print("cuMemAddressReserve(0x302000000, 2 GiB) ->", r, hex(got.value), flush=True)
# map and write it, so the tool sees a real allocation there
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("reqHandle", ctypes.c_int), ("locType", ctypes.c_int), ("locId", ctypes.c_int),
                ("win32", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte), ("gpuDirect", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
prop = Prop(1, 0, 1, dev.value)
h = ctypes.c_uint64()
ck(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(2 << 20), ctypes.byref(prop), ctypes.c_ulonglong(0)), "create")
ck(cu.cuMemMap(ctypes.c_uint64(got.value), ctypes.c_size_t(2 << 20), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)), "map")
class Acc(ctypes.Structure):
    _fields_ = [("locType", ctypes.c_int), ("locId", ctypes.c_int), ("flags", ctypes.c_int)]
acc = Acc(1, dev.value, 3)
ck(cu.cuMemSetAccess(ctypes.c_uint64(got.value), ctypes.c_size_t(2 << 20), ctypes.byref(acc), ctypes.c_size_t(1)), "access")
ck(cu.cuMemsetD8_v2(ctypes.c_uint64(got.value), 7, ctypes.c_size_t(2 << 20)), "memset")
ck(cu.cuCtxSynchronize(), "sync")
print("mapped and written at", hex(got.value), "OK"); maps("end:")

"""What CUPTI kernel activity records cost per PyTorch op, inside one process (paired
segments of N `x.add_(1.0)` ops, so per-process noise cancels; docs/facts.md §28):
  A  before CUPTI is touched
  D  CUPTI initialised (activity callbacks registered), nothing enabled
  B  CONCURRENT_KERNEL activity enabled (no subscriber), as kerncap's profile mode runs
  C  after cuptiActivityDisable: is CUPTI still in the launch path?
  T  toggled by a thread, on ON_MS of every PERIOD_MS: would sampling windows help?
Prints per-segment ns/op medians, the ratios against A and the cost of enable/disable.
Needs torch and the CUDA toolkit's libcupti; no kerncap.

  python3 bench/cupti_activity.py        (N=30000 ROUNDS=8 PERIOD_MS=50 ON_MS=5)
"""
import ctypes, glob, os, statistics, sys, threading, time
import torch

N = int(os.environ.get("N", "30000"))
ROUNDS = int(os.environ.get("ROUNDS", "8"))
cands = sorted(glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*") + glob.glob("/usr/local/cuda*/targets/x86_64-linux/lib/libcupti.so*"))
x = torch.zeros(256, device="cuda")
torch.cuda.synchronize()


def seg():
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(N):
        x.add_(1.0)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / N


res = {k: [] for k in "ADBCT"}
for _ in range(3):
    seg()  # warm
for _ in range(ROUNDS):
    res["A"].append(seg())

cupti = ctypes.CDLL(cands[0])
print("libcupti:", cands[0])
REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
bufs, valid = {}, [0, 0]
SIZE = 32 << 20


@REQ
def requested(buf, size, maxrec):
    b = ctypes.create_string_buffer(SIZE)
    addr = ctypes.addressof(b)
    bufs[addr] = b
    buf[0] = addr
    size[0] = SIZE
    maxrec[0] = 0


@DONE
def completed(ctx, sid, buf, size, v):
    valid[0] += v
    valid[1] += 1
    bufs.pop(buf, None)


def chk(r, what):
    if r != 0:
        sys.exit(f"{what} -> {r}")


chk(cupti.cuptiActivityRegisterCallbacks(requested, completed), "register")
for _ in range(ROUNDS):
    res["D"].append(seg())  # CUPTI initialised, callbacks registered, nothing enabled yet
KIND = 10  # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
ton, toff = [], []


def enable():
    t = time.perf_counter_ns(); chk(cupti.cuptiActivityEnable(KIND), "enable"); ton.append(time.perf_counter_ns() - t)


def disable():
    t = time.perf_counter_ns(); chk(cupti.cuptiActivityDisable(KIND), "disable"); toff.append(time.perf_counter_ns() - t)


period, on = float(os.environ.get("PERIOD_MS", "50")) / 1e3, float(os.environ.get("ON_MS", "5")) / 1e3
for _ in range(ROUNDS):
    enable(); res["B"].append(seg()); disable()
    res["C"].append(seg())
    stop = threading.Event()

    def toggler():
        while not stop.is_set():
            enable(); time.sleep(on); disable(); time.sleep(period - on)

    th = threading.Thread(target=toggler); th.start()
    res["T"].append(seg())
    stop.set(); th.join()
cupti.cuptiActivityFlushAll(1)
med = {k: statistics.median(v) for k, v in res.items()}
print(f"N={N} rounds={ROUNDS} ns/op medians: " + "  ".join(f"{k}={med[k]:.0f}" for k in "ADBCT"))
print("ns/op all:", {k: [round(v) for v in res[k]] for k in "ADBCT"})
print("ratios vs A: " + " ".join(f"{k}={med[k]/med['A']:.3f}" for k in "DBCT"))
print(f"enable us median {statistics.median(ton)/1e3:.1f} max {max(ton)/1e3:.1f}; disable us median {statistics.median(toff)/1e3:.1f} max {max(toff)/1e3:.1f}; toggles {len(ton)}")
print(f"records bytes {valid[0]} in {valid[1]} buffers (~{valid[0]//200} records of ~200 B)")

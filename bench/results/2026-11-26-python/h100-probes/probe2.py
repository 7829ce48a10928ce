"""Populating a 16 GiB host-preferred, GPU-mapped managed range from host threads (touch.c):
threads and the stride between writes, then a GPU fill and sum. Needs CuPy and cc."""
import ctypes, time, sys, subprocess
import cupy as cp
subprocess.check_call(["cc","-O2","-shared","-fPIC","-pthread","touch.c","-o","touch.so"])
T=ctypes.CDLL("./touch.so"); T.touch.argtypes=[ctypes.c_uint64,ctypes.c_size_t,ctypes.c_int,ctypes.c_size_t,ctypes.c_int]
cp.cuda.runtime.free(0)
cu = ctypes.CDLL("libcuda.so.1")
class Loc(ctypes.Structure): _fields_=[("type",ctypes.c_int),("id",ctypes.c_int)]
GPU=Loc(1,0); CPU=Loc(2,0)
cu.cuMemAllocManaged.argtypes=[ctypes.POINTER(ctypes.c_uint64),ctypes.c_size_t,ctypes.c_uint]
cu.cuMemAdvise_v2.argtypes=[ctypes.c_uint64,ctypes.c_size_t,ctypes.c_int,Loc]
cu.cuMemFree_v2.argtypes=[ctypes.c_uint64]
G=1<<30; H=16*G
def sync(): cp.cuda.Device(0).synchronize()
for threads,stride in [(16,0),(16,4096),(32,4096),(16,65536),(8,4096),(32,0)]:
    p=ctypes.c_uint64(); cu.cuMemAllocManaged(ctypes.byref(p),H,1); p=p.value
    cu.cuMemAdvise_v2(p,H,3,CPU); cu.cuMemAdvise_v2(p,H,5,GPU)
    t=time.perf_counter(); T.touch(p,H,threads,stride,0); d=time.perf_counter()-t
    a=cp.ndarray(H//4,dtype=cp.float32,memptr=cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(p,H,None),0))
    sync(); t=time.perf_counter(); a.fill(1.0); sync(); f=time.perf_counter()-t
    t=time.perf_counter(); s=float(a.sum()); r=time.perf_counter()-t
    print(f"threads {threads} stride {stride}: touch {d:.3f} s ({H/d/1e9:.1f} GB/s) fill {f:.3f} sum {r:.3f} ok={s==H//4}",flush=True)
    del a; cu.cuMemFree_v2(p)

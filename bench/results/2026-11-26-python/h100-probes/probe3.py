"""Matrix products reading host memory: 16 matrices of 8192 x 8192 float32 in a managed range
(host-preferred, GPU-mapped; populated by host threads or by prefetch) and in pinned host memory,
times W @ y (batch 16 and 256), y @ W and a sum. Needs CuPy and cc."""
import ctypes, time
import cupy as cp
cp.cuda.runtime.free(0)
cu = ctypes.CDLL("libcuda.so.1")
class Loc(ctypes.Structure): _fields_=[("type",ctypes.c_int),("id",ctypes.c_int)]
GPU=Loc(1,0); CPU=Loc(2,0)
cu.cuMemAllocManaged.argtypes=[ctypes.POINTER(ctypes.c_uint64),ctypes.c_size_t,ctypes.c_uint]
cu.cuMemAdvise_v2.argtypes=[ctypes.c_uint64,ctypes.c_size_t,ctypes.c_int,Loc]
cu.cuMemPrefetchAsync_v2.argtypes=[ctypes.c_uint64,ctypes.c_size_t,Loc,ctypes.c_uint,ctypes.c_void_p]
import subprocess; subprocess.check_call(["cc","-O2","-shared","-fPIC","-pthread","touch.c","-o","touch.so"])
T=ctypes.CDLL("./touch.so"); T.touch.argtypes=[ctypes.c_uint64,ctypes.c_size_t,ctypes.c_int,ctypes.c_size_t,ctypes.c_int]
n=8192; W=n*n*4; K=16; H=K*W
def sync(): cp.cuda.Device(0).synchronize()
def view(p): return [cp.ndarray((n,n),dtype=cp.float32,memptr=cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(p+i*W,W,None),0)) for i in range(K)]
def bench(name, ws):
    flat=[w.ravel() for w in ws]
    for batch in (16,256):
        y=cp.ones((n,batch),dtype=cp.float32)
        ws[0]@y; sync()
        t=time.perf_counter()
        for w in ws: z=w@y
        sync(); d=time.perf_counter()-t
        print(f"{name} gemm batch {batch}: {d:.3f} s {H/d/1e9:.1f} GB/s",flush=True)
    y=cp.ones((16,n),dtype=cp.float32)
    t=time.perf_counter()
    for w in ws: z=y@w
    sync(); d=time.perf_counter()-t; print(f"{name} y@W (column reads) b16: {d:.3f} s {H/d/1e9:.1f} GB/s",flush=True)
    t=time.perf_counter()
    for f in flat: f.sum()
    sync(); d=time.perf_counter()-t; print(f"{name} sum: {d:.3f} s {H/d/1e9:.1f} GB/s",flush=True)
def managed(how):
    p=ctypes.c_uint64(); cu.cuMemAllocManaged(ctypes.byref(p),H,1); p=p.value
    cu.cuMemAdvise_v2(p,H,3,CPU); cu.cuMemAdvise_v2(p,H,5,GPU)
    if how=="touch": T.touch(p,H,16,4096,0)
    else: cu.cuMemPrefetchAsync_v2(p,H,CPU,0,None); sync()
    return p
bench("managed-touch", view(managed("touch")))
bench("managed-prefetch", view(managed("prefetch")))
hp=cp.cuda.alloc_pinned_memory(H)
ctypes.memset(hp.ptr,0,H)
bench("pinned", view(hp.ptr))

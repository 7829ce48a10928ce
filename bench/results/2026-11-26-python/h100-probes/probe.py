"""Populating managed memory before tiered placement was built: a 16 GiB range (argv[1] GiB) made
host-preferred and GPU-mapped, populated by GPU faults, by prefetch (one stream, eight) or by host
threads, then written and summed on the GPU; the same for a GPU-preferred range; and the link.
Needs CuPy. python3 probe.py 16 [out.json]"""
import ctypes, time, sys, threading, json
import cupy as cp
cp.cuda.runtime.free(0); cp.cuda.Device(0).synchronize()
cu = ctypes.CDLL("libcuda.so.1")
class Loc(ctypes.Structure): _fields_=[("type",ctypes.c_int),("id",ctypes.c_int)]
GPU=Loc(1,0); CPU=Loc(2,0)
cu.cuMemAllocManaged.argtypes=[ctypes.POINTER(ctypes.c_uint64),ctypes.c_size_t,ctypes.c_uint]
cu.cuMemAdvise_v2.argtypes=[ctypes.c_uint64,ctypes.c_size_t,ctypes.c_int,Loc]
cu.cuMemPrefetchAsync_v2.argtypes=[ctypes.c_uint64,ctypes.c_size_t,Loc,ctypes.c_uint,ctypes.c_void_p]
cu.cuMemFree_v2.argtypes=[ctypes.c_uint64]
def ck(r,w):
    if r: raise SystemExit(f"{w} -> {r}")
G=1<<30
def alloc(n):
    p=ctypes.c_uint64(); ck(cu.cuMemAllocManaged(ctypes.byref(p),n,1),"alloc"); return p.value
def arr(p,n):
    return cp.ndarray(n//4,dtype=cp.float32,memptr=cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(p,n,None),0))
def sync(): cp.cuda.Device(0).synchronize()
out={}
def timed(name,f):
    sync(); t=time.perf_counter(); f(); sync(); d=time.perf_counter()-t; out[name]=d; print(f"{name}: {d:.3f} s",flush=True); return d
H=int(float(sys.argv[1])*G) if len(sys.argv)>1 else 16*G
# link speed: pinned copies
hp=cp.cuda.alloc_pinned_memory(4*G); dv=cp.empty(G,dtype=cp.float32)
def h2d(): cp.cuda.runtime.memcpy(dv.data.ptr,hp.ptr,4*G,1)
def d2h(): cp.cuda.runtime.memcpy(hp.ptr,dv.data.ptr,4*G,2)
h2d(); print("h2d GB/s",4*G/timed("h2d4",h2d)/1e9); print("d2h GB/s",4*G/timed("d2h4",d2h)/1e9)
del dv,hp
def host_tier(p,n,how):
    ck(cu.cuMemAdvise_v2(p,n,3,CPU),"pl cpu"); ck(cu.cuMemAdvise_v2(p,n,5,GPU),"ab gpu")
    if how=="prefetch1":
        ck(cu.cuMemPrefetchAsync_v2(p,n,CPU,0,None),"pf")
    elif how.startswith("prefetchS"):
        k=int(how[9:]); ss=[cp.cuda.Stream(non_blocking=True) for _ in range(k)]; c=n//k
        for i,s in enumerate(ss): ck(cu.cuMemPrefetchAsync_v2(p+i*c,c,CPU,0,s.ptr),"pf")
        for s in ss: s.synchronize()
    elif how.startswith("touch"):
        k=int(how[5:]); c=n//k
        ts=[threading.Thread(target=ctypes.memset,args=(p+i*c,0,c)) for i in range(k)]
        [t.start() for t in ts]; [t.join() for t in ts]
for how in ["fault","prefetch1","prefetchS8","touch1","touch16"]:
    p=alloc(H); a=arr(p,H)
    timed(f"host-{how}-place",lambda: host_tier(p,H,how))
    timed(f"host-{how}-fill",lambda: a.fill(1.0))
    timed(f"host-{how}-sum",lambda: float(a.sum()))
    timed(f"host-{how}-sum2",lambda: float(a.sum()))
    timed(f"host-{how}-fill2",lambda: a.fill(2.0))
    del a; ck(cu.cuMemFree_v2(p),"free")
for how in ["fault","prefetch"]:
    p=alloc(H); a=arr(p,H)
    def place():
        ck(cu.cuMemAdvise_v2(p,H,3,GPU),"pl gpu")
        if how=="prefetch": ck(cu.cuMemPrefetchAsync_v2(p,H,GPU,0,None),"pf")
    timed(f"dev-{how}-place",place)
    timed(f"dev-{how}-fill",lambda: a.fill(1.0))
    timed(f"dev-{how}-sum",lambda: float(a.sum()))
    del a; ck(cu.cuMemFree_v2(p),"free")
p=alloc(H); a=arr(p,H)
timed("plain-fill",lambda: a.fill(1.0)); timed("plain-sum",lambda: float(a.sum()))
json.dump(out,open(sys.argv[2] if len(sys.argv)>2 else "/dev/null","w"),indent=1)

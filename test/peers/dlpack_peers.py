#!/usr/bin/env python3
"""tx and its peers on one GPU (issue 16): PyTorch and CuPy tensors go to tx
through DLPack and come back, zero-copy, on the peers' streams.

    python3 dlpack_peers.py path/to/libtx_peers_shim.so

Checked: the data address tx sees is the peer's (and the reverse); a write
through one side is read through the other; a tx kernel on a peer's stream
runs after the peer's earlier kernel on that stream (a long torch sleep,
then a fill, then tx reading the filled values); views (a transposed torch
tensor) go through tx's strided ops; the DLPack deleters run (the peer's
memory stays valid while tx holds it). Exit 77 (skipped) without a GPU or
without torch; a missing CuPy is reported and its half is skipped.
"""
import ctypes
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)
if not torch.cuda.is_available():
    print("no GPU: skipped")
    sys.exit(77)

lib = ctypes.CDLL(sys.argv[1])
lib.tx_peers_error.restype = ctypes.c_char_p
P, U64P = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)
lib.tx_peers_gelu_inplace.argtypes = [P, P, U64P]
lib.tx_peers_gelu_inplace_versioned.argtypes = [P, P, U64P]
lib.tx_peers_add.argtypes = [P, P, P, ctypes.POINTER(ctypes.c_void_p)]
lib.tx_peers_make.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), U64P]
lib.tx_peers_kept_sum.argtypes = [ctypes.POINTER(ctypes.c_double)]
if not lib.tx_peers_dlpack_available():
    print("FAIL: this tx was built without a DLPack header")
    sys.exit(1)

api = ctypes.pythonapi
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def call(rc):
    if rc != 0:
        raise RuntimeError(lib.tx_peers_error().decode())


def give(capsule, name=b"dltensor"):
    """The DLManagedTensor* (name b"dltensor") or DLManagedTensorVersioned*
    (b"dltensor_versioned") of a capsule, consumed (tx now owns it)."""
    p = api.PyCapsule_GetPointer(capsule, name)
    api.PyCapsule_SetName(capsule, b"used_" + name)
    return ctypes.c_void_p(p)


class FromTx:
    """A DLManagedTensor* from tx, as the __dlpack__ protocol object that
    torch.from_dlpack and cupy.from_dlpack take."""

    def __init__(self, managed, device_id=0):
        self.managed, self.device_id = managed, device_id

    def __dlpack__(self, stream=None, **kwargs):
        return api.PyCapsule_New(self.managed, b"dltensor", None)

    def __dlpack_device__(self):
        return (2, self.device_id)  # kDLCUDA


def torch_side():
    g = torch.Generator(device="cuda").manual_seed(1234)
    # 1. torch -> tx, in place on torch's stream: tx writes torch's memory.
    x = torch.rand(4099, device="cuda", generator=g) * 6 - 3
    want = F.gelu(x.double()).float()
    seen = ctypes.c_uint64()
    stream = torch.cuda.current_stream().cuda_stream
    call(lib.tx_peers_gelu_inplace(give(torch.utils.dlpack.to_dlpack(x)), ctypes.c_void_p(stream),
                                   ctypes.byref(seen)))
    check(seen.value == x.data_ptr(), "torch -> tx: tx sees torch's address (zero-copy)")
    torch.cuda.synchronize()
    check(torch.allclose(x, want, rtol=1e-5, atol=1e-6), "torch -> tx: tx's write read by torch")

    # 2. Ordering on a torch stream: a long sleep, then a fill, then tx.
    s = torch.cuda.Stream()
    a = torch.zeros(1 << 20, device="cuda")
    b = torch.rand(1 << 20, device="cuda", generator=g)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time on this stream
        a.fill_(2.5)  # the producer: a torch kernel
        r = ctypes.c_void_p()
        call(lib.tx_peers_add(give(torch.utils.dlpack.to_dlpack(a)),
                              give(torch.utils.dlpack.to_dlpack(b)),
                              ctypes.c_void_p(s.cuda_stream), ctypes.byref(r)))
        z = torch.from_dlpack(FromTx(r))
    s.synchronize()
    check(torch.equal(z, b + 2.5), "a tx kernel on torch's stream runs after torch's kernel")

    # 3. A transposed torch view through tx's strided ops.
    m = torch.rand(300, 200, device="cuda", generator=g).half()
    n = torch.rand(200, 300, device="cuda", generator=g).half()
    r = ctypes.c_void_p()
    call(lib.tx_peers_add(give(torch.utils.dlpack.to_dlpack(m.t())),
                          give(torch.utils.dlpack.to_dlpack(n)),
                          ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                          ctypes.byref(r)))
    z = torch.from_dlpack(FromTx(r))
    torch.cuda.synchronize()
    check(torch.equal(z, m.t() + n), "a transposed torch view: tx's add equals torch's")

    # 4. tx -> torch: the address is tx's, and torch's write is read by tx.
    r, data = ctypes.c_void_p(), ctypes.c_uint64()
    call(lib.tx_peers_make(1000, ctypes.byref(r), ctypes.byref(data)))
    t = torch.from_dlpack(FromTx(r))
    check(t.data_ptr() == data.value, "tx -> torch: torch sees tx's address (zero-copy)")
    check(torch.equal(t, torch.arange(1000, device="cuda", dtype=torch.float32) * 0.5),
          "tx -> torch: values")
    t.mul_(2)
    torch.cuda.synchronize()
    total = ctypes.c_double()
    call(lib.tx_peers_kept_sum(ctypes.byref(total)))
    check(abs(total.value - 999 * 1000 / 2) < 1e-3, "tx -> torch: torch's write read by tx")
    call(lib.tx_peers_release())
    check(float(t.sum()) == 999 * 1000 / 2, "the storage outlives tx's handle while torch holds it")


def cupy_side():
    try:
        import cupy
    except ImportError:
        print("SKIP cupy is not installed: its half is not checked")
        return
    rng = cupy.random.default_rng(99)
    x = rng.random(5000, dtype=cupy.float32) * 6 - 3
    want = cupy.asarray(F.gelu(torch.as_tensor(cupy.asnumpy(x)).double()).float().numpy())
    seen = ctypes.c_uint64()
    stream = cupy.cuda.get_current_stream().ptr
    # DLPack 1.x: the versioned struct, on cupy's current stream.
    try:
        cap, name, fn = x.__dlpack__(max_version=(1, 0)), b"dltensor_versioned", "versioned"
    except TypeError:  # a CuPy before DLPack 1.0
        cap, name, fn = x.__dlpack__(), b"dltensor", "unversioned"
    print(f"cupy {cupy.__version__} hands out the {fn} struct")
    entry = lib.tx_peers_gelu_inplace_versioned if fn == "versioned" else lib.tx_peers_gelu_inplace
    call(entry(give(cap, name), ctypes.c_void_p(stream), ctypes.byref(seen)))
    check(seen.value == x.data.ptr, "cupy -> tx: tx sees cupy's address (zero-copy)")
    cupy.cuda.get_current_stream().synchronize()
    check(bool(cupy.allclose(x, want, rtol=1e-5, atol=1e-6)), "cupy -> tx: tx's write read by cupy")
    r, data = ctypes.c_void_p(), ctypes.c_uint64()
    call(lib.tx_peers_make(777, ctypes.byref(r), ctypes.byref(data)))
    c = cupy.from_dlpack(FromTx(r))
    check(c.data.ptr == data.value, "tx -> cupy: cupy sees tx's address (zero-copy)")
    c *= 2
    cupy.cuda.get_current_stream().synchronize()
    total = ctypes.c_double()
    call(lib.tx_peers_kept_sum(ctypes.byref(total)))
    check(abs(total.value - 776 * 777 / 2) < 1e-3, "tx -> cupy: cupy's write read by tx")
    call(lib.tx_peers_release())


torch_side()
cupy_side()
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)

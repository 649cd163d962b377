"""Attention forward from an evo artifact, callable on PyTorch tensors.

Written by `evo export` next to manifest.json and the CUBINs it describes. Needs only
PyTorch and the CUDA driver (libcuda.so.1): no evo, no Rust, no compiler. The CUBIN is
loaded with cuModuleLoadData into the device's primary context (the one PyTorch uses);
a variant's kernels (one, or several with scratch buffers and TMA tensor maps) are
launched in order with cuLaunchKernel on PyTorch's current stream.

    import sys; sys.path.insert(0, "path/to/artifact")
    from evo_kernel import attention
    o = attention(q, k, v, causal=False)   # q: (batch, heads, seq_q, head_dim), k, v: (batch, heads, seq_kv, head_dim)

`plan()` does every check and computes the launches (variant; per kernel grid, block,
shared memory and arguments; scratch sizes) without touching a GPU or importing torch;
`attention()` adds the allocations and the driver calls.
"""
import ast
import ctypes
import hashlib
import json
import math
import os

_DIR = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_DIR, "manifest.json")) as _f:
    MANIFEST = json.load(_f)
if MANIFEST.get("schema") != "evo-artifact-2":
    raise ImportError(f"{_DIR}/manifest.json has schema {MANIFEST.get('schema')!r}; this evo_kernel.py reads 'evo-artifact-2'")
if MANIFEST["problem"] != "sdpa_fwd":
    raise ImportError(f"this artifact is for problem {MANIFEST['problem']!r}; evo_kernel.attention implements sdpa_fwd")

# str(tensor.dtype) -> the artifact's DTYPE.
DTYPES = {"torch.float16": "f16", "torch.bfloat16": "bf16"}
_CTYPES = {"pointer": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}
_ELEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "e4m3": 1, "u8": 1}
# CUtensorMapDataType and CUtensorMapSwizzle values (cuda.h).
_TMAP_DTYPE = {"u8": 0, "e4m3": 0, "f16": 6, "f32": 7, "bf16": 9}
_TMAP_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
_VARIANTS = {v["name"]: v for v in MANIFEST["variants"]}


class ArtifactError(ValueError):
    """A call this artifact cannot serve (wrong dtype, shape, layout, ...)."""


def eval_expr(text, env):
    """Evaluates a launch expression of the manifest: integers, + - * / % (integer
    division), parentheses, ceil_div, round_up, min, max."""
    funcs = {
        "ceil_div": lambda a, b: -(-a // b),
        "round_up": lambda a, b: -(-a // b) * b,
        "min": min,
        "max": max,
    }
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a // b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in env:
                raise ArtifactError(f"launch expression {text!r}: unknown variable {n.id}")
            return int(env[n.id])
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in funcs and not n.keywords:
            return funcs[n.func.id](*[ev(a) for a in n.args])
        raise ArtifactError(f"launch expression {text!r}: unsupported syntax {ast.dump(n)}")

    return ev(ast.parse(text, mode="eval"))


def launch_dims(rule, env):
    """(grid, block, shared_bytes) of one launch rule of the manifest for `env` (the
    variant's constants and the run-time shape variables, e.g. BATCH, HEADS, SEQ_Q, SEQ_KV)."""
    grid = [eval_expr(e, env) for e in rule["grid"]]
    block = [eval_expr(e, env) for e in rule["block"]]
    smem = eval_expr(rule["shared_bytes"], env)
    limits = [(grid[0], 2**31 - 1, "grid.x"), (grid[1], 65535, "grid.y"), (grid[2], 65535, "grid.z")]
    for value, top, what in limits:
        if not 1 <= value <= top:
            shape = {k: env[k] for k in MANIFEST["shape_vars"] if k in env}
            raise ArtifactError(f"kernel {rule['kernel']}: {what} = {value} is out of range 1..{top} for shape {shape}")
    return grid, block, smem


def _nearness(a, b):
    return sum(abs(math.log2(a[k] / b[k])) for k in b)


def select(spec, shape):
    """The variant for a specialization (dict: DTYPE, HEAD_DIM, CAUSAL) and run-time
    shape, by the manifest's dispatch rule (see manifest.json `dispatch.rule`)."""
    d = MANIFEST["dispatch"]
    entries = [e for e in d["table"] if e["specialization"] == spec]
    if not entries:
        have = sorted({json.dumps(e["specialization"], sort_keys=True) for e in d["table"]})
        raise ArtifactError(f"this artifact has no kernel for {json.dumps(spec, sort_keys=True)}; it has: {', '.join(have)}")
    if d["mode"] == "specialization":
        return _VARIANTS[entries[0]["variant"]]
    for e in entries:
        if e["shape"] == shape:
            return _VARIANTS[e["variant"]]
    best = min(entries, key=lambda e: _nearness(shape, e["shape"]))  # min keeps the first of ties
    return _VARIANTS[best["variant"]]


class Launch:
    """One kernel launch: name, geometry and arguments [(name, kind, value)], kind one of
    pointer, i32, i64, f32 or tensor_map (value: the map's description, see plan())."""

    def __init__(self, kernel, grid, block, shared_bytes, args):
        self.kernel, self.grid, self.block, self.shared_bytes, self.args = kernel, grid, block, shared_bytes, args

    def as_dict(self):
        return {"kernel": self.kernel, "grid": self.grid, "block": self.block,
                "shared_bytes": self.shared_bytes, "args": [list(a) for a in self.args]}


class Plan:
    """Everything a call needs: the variant, its launches in order and its scratch
    buffers [(name, bytes)]."""

    def __init__(self, variant, launches, scratch, out_shape):
        self.variant, self.launches, self.scratch, self.out_shape = variant, launches, scratch, out_shape

    def as_dict(self):
        return {"variant": self.variant["name"], "launches": [l.as_dict() for l in self.launches],
                "scratch": [list(s) for s in self.scratch]}


def scratch_sizes(variant, env):
    """[(name, bytes)] of a variant's scratch buffers for `env` (constants and shape)."""
    out = []
    for s in variant.get("scratch", []):
        n = eval_expr(s["len"], env)
        if n < 1:
            raise ArtifactError(f"scratch {s['name']}: {n} elements")
        out.append((s["name"], n * _ELEM_BYTES[s["elem"]]))
    return out


def plan(q, k, v, causal=False, scale=None, out=None, scratch=None, copies_made=False):
    """Checks q, k, v (and out, if given) and computes the launches, without a GPU.

    q: (batch, heads, seq_q, head_dim); k, v: (batch, heads, seq_kv, head_dim); same
    dtype (float16 or bfloat16, as the artifact was built) and CUDA device; last dim
    contiguous; other strides multiples of 8 elements, data 16-byte aligned (a variant
    that reads a tensor through a TMA tensor map needs that tensor contiguous). `out` is
    the output tensor (batch, heads, seq_q, head_dim); None plans for a contiguous one at
    address 0. `scratch`: {name: device address} of the variant's scratch buffers (sizes
    from scratch_sizes()); None plans with address 0. `copies_made`: the caller will pass
    contiguous copies of the tensors a tensor map reads (attention() does), so their
    layout is not checked."""
    names = ("q", "k", "v")
    for name, t in zip(names, (q, k, v)):
        if len(t.shape) != 4:
            raise ArtifactError(f"{name} must be 4-D (batch, heads, seq, head_dim); it has shape {tuple(t.shape)}")
        if str(t.dtype) not in DTYPES:
            raise ArtifactError(f"{name} has dtype {t.dtype}; this artifact takes torch.float16 or torch.bfloat16 (see the specializations in manifest.json)")
        if not t.is_cuda:
            raise ArtifactError(f"{name} is on {t.device}; move it to a CUDA device (q.cuda())")
    if len({str(t.dtype) for t in (q, k, v)}) != 1:
        raise ArtifactError(f"q, k, v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if len({str(t.device) for t in (q, k, v)}) != 1:
        raise ArtifactError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    B, H, SQ, D = (int(x) for x in q.shape)
    SKV = int(k.shape[2])
    if tuple(k.shape) != (B, H, SKV, D) or tuple(v.shape) != tuple(k.shape):
        raise ArtifactError(f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
                            "want q (batch, heads, seq_q, head_dim) and k, v (batch, heads, seq_kv, head_dim)")
    for what, x in (("batch", B), ("heads", H), ("seq_q", SQ), ("seq_kv", SKV), ("head_dim", D)):
        if not 1 <= x <= 2**31 - 1:
            raise ArtifactError(f"{what} = {x} is out of range (1 .. 2^31-1)")
    spec = {"CAUSAL": bool(causal), "DTYPE": DTYPES[str(q.dtype)], "HEAD_DIM": D}
    shape = {"BATCH": B, "HEADS": H, "SEQ_KV": SKV, "SEQ_Q": SQ}
    variant = select(spec, shape)
    env = dict(variant["constants"])
    env.update(shape)
    if out is None:
        o_strides, o_ptr = (H * SQ * D, SQ * D, D, 1), 0
    else:
        if tuple(out.shape) != (B, H, SQ, D) or str(out.dtype) != str(q.dtype):
            raise ArtifactError(f"out must be {(B, H, SQ, D)} {q.dtype}; got {tuple(out.shape)} {out.dtype}")
        o_strides, o_ptr = tuple(out.stride()), out.data_ptr()
    values = {"batch": B, "heads": H, "seq_q": SQ, "seq_kv": SKV,
              "softmax_scale": float(1.0 / math.sqrt(D) if scale is None else scale)}
    tensors = {}  # name -> (shape, strides, address)
    for name, shp, strides, ptr in [(n, tuple(t.shape), tuple(t.stride()), t.data_ptr()) for n, t in zip(names, (q, k, v))] + [("o", (B, H, SQ, D), o_strides, o_ptr)]:
        if strides[3] != 1 and D > 1:
            raise ArtifactError(f"{name} must be contiguous in its last dimension (stride {strides[3]}); call .contiguous()")
        for dim, s in zip(("batch", "head", "seq"), strides[:3]):
            if s % 8 != 0 or s < 0:
                raise ArtifactError(f"{name}'s {dim} stride is {s} elements; the kernel needs non-negative multiples of 8 (16 bytes); call .contiguous()")
            values[f"{name}_{dim}_stride"] = s
        if ptr % 16 != 0:
            raise ArtifactError(f"{name}'s data is not 16-byte aligned (address {ptr:#x}); call .contiguous() or .clone()")
        values[name] = ptr
        tensors[name] = (shp, strides, ptr)
    kinds = {p["name"]: p["kind"] for p in MANIFEST["abi"]["params"]}
    for p in MANIFEST["abi"]["params"]:
        if p["name"] not in values:
            raise ArtifactError(f"the ABI parameter {p['name']} ({p['ctype']}) is unknown to this evo_kernel.py")
    sizes = scratch_sizes(variant, env)
    scratch = scratch if scratch is not None else {n: 0 for n, _ in sizes}
    launches = []
    for rule in variant["launches"]:
        grid, block, smem = launch_dims(rule, env)
        args = []
        for a in rule.get("args") or [{"param": p["name"]} for p in MANIFEST["abi"]["params"]]:
            if "param" in a:
                args.append((a["param"], kinds[a["param"]], values[a["param"]]))
            elif "scratch" in a:
                args.append((a["scratch"], "pointer", scratch[a["scratch"]]))
            elif "i32" in a or "i64" in a:
                kind = "i32" if "i32" in a else "i64"
                x = eval_expr(a[kind], env)
                if kind == "i32" and not -2**31 <= x < 2**31:
                    raise ArtifactError(f"kernel {rule['kernel']}: i32 argument {a[kind]} = {x} does not fit in 32 bits")
                args.append((a[kind], kind, x))
            elif "tensor_map" in a:
                t = a["tensor_map"]
                shp, strides, ptr = tensors[t["param"]]
                contiguous, acc = [], 1
                for n in reversed(shp):
                    contiguous.insert(0, acc)
                    acc *= n
                dims = [eval_expr(e, env) for e in t["dims"]]
                if not copies_made and tuple(strides) != tuple(contiguous) or math.prod(dims) != acc:
                    raise ArtifactError(f"{t['param']} must be contiguous for this variant (it reads it through a TMA tensor map); call .contiguous()")
                elem = _ELEM_BYTES[t["elem"]]
                tmap_strides, s = [], elem
                for n in dims[:-1]:
                    s *= n
                    tmap_strides.append(s)
                args.append((f"tensor_map({t['param']})", "tensor_map",
                             {"elem": t["elem"], "address": ptr, "dims": dims, "strides_bytes": tmap_strides,
                              "box": [eval_expr(e, env) for e in t["box_dims"]], "swizzle_bytes": t["swizzle_bytes"]}))
            else:
                raise ArtifactError(f"kernel {rule['kernel']}: argument {a} is unknown to this evo_kernel.py")
        launches.append(Launch(rule["kernel"], grid, block, smem, args))
    return Plan(variant, launches, sizes, (B, H, SQ, D))


# ---- the CUDA driver, through ctypes ------------------------------------------------------

_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class _Driver:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"cannot load the CUDA driver (libcuda.so.1): {e}") from e
        L, vp, u = self.lib, ctypes.c_void_p, ctypes.c_uint
        L.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]
        L.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
        L.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
        L.cuFuncSetAttribute.argtypes = [vp, ctypes.c_int, ctypes.c_int]
        L.cuCtxPushCurrent_v2.argtypes = [vp]
        L.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(vp)]
        L.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(vp), ctypes.c_int]
        L.cuCtxGetCurrent.argtypes = [ctypes.POINTER(vp)]
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        L.cuTensorMapEncodeTiled.argtypes = [vp, ctypes.c_int, u, vp, u64p, u64p, u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.check(L.cuInit(0), "cuInit")
        self.contexts, self.modules, self.functions, self.smem_set = {}, {}, {}, {}

    def check(self, result, what):
        if result != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else result}")

    def context(self, ordinal):
        if ordinal not in self.contexts:
            dev, ctx = ctypes.c_int(), ctypes.c_void_p()
            self.check(self.lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
            self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
            self.contexts[ordinal] = ctx
        return self.contexts[ordinal]

    def function(self, ordinal, variant, kernel):
        key = (ordinal, variant["name"])
        if key not in self.modules:
            path = os.path.join(_DIR, variant["cubin_file"])
            with open(path, "rb") as f:
                image = f.read()
            if hashlib.sha256(image).hexdigest() != MANIFEST["files"][variant["cubin_file"]]:
                raise RuntimeError(f"{path} does not match the SHA-256 in manifest.json; the artifact was modified")
            module = ctypes.c_void_p()
            pushed = self._push(ordinal)
            try:
                self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), f"cuModuleLoadData({variant['cubin_file']})")
            finally:
                self._pop(pushed)
            self.modules[key] = module
        fkey = key + (kernel,)
        if fkey not in self.functions:
            fn = ctypes.c_void_p()
            self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), self.modules[key], kernel.encode()), f"cuModuleGetFunction({kernel})")
            self.functions[fkey] = fn
        return self.functions[fkey]

    def tensor_map(self, t):
        """A 128-byte CUtensorMap (in a 128-byte aligned buffer) for a plan's tensor_map
        argument; returns (buffer, address) (keep the buffer alive until the launch)."""
        buf = ctypes.create_string_buffer(256)
        addr = (ctypes.addressof(buf) + 127) // 128 * 128
        rank = len(t["dims"])
        dims = (ctypes.c_uint64 * rank)(*t["dims"])
        strides = (ctypes.c_uint64 * max(rank - 1, 1))(*(t["strides_bytes"] or [0]))
        box = (ctypes.c_uint32 * rank)(*t["box"])
        ones = (ctypes.c_uint32 * rank)(*([1] * rank))
        # No interleave, the given swizzle, L2 promotion 128 B, out-of-bounds elements zero.
        self.check(self.lib.cuTensorMapEncodeTiled(ctypes.c_void_p(addr), _TMAP_DTYPE[t["elem"]], rank, ctypes.c_void_p(t["address"]),
                                                   dims, strides, box, ones, 0, _TMAP_SWIZZLE[t["swizzle_bytes"]], 2, 0),
                   "cuTensorMapEncodeTiled")
        return buf, addr

    def _push(self, ordinal):
        """Makes the device's primary context current; False when it already was (as on
        a PyTorch thread): then nothing is pushed, which keeps CUDA-graph capture happy."""
        ctx, cur = self.context(ordinal), ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
        if cur.value == ctx.value:
            return False
        self.check(self.lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        return True

    def _pop(self, pushed):
        if pushed:
            self.check(self.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")

    def launch(self, ordinal, p, stream):
        pushed = self._push(ordinal)
        try:
            for l in p.launches:
                fn = self.function(ordinal, p.variant, l.kernel)
                keep, ptrs = [], []
                for _, kind, value in l.args:
                    if kind == "tensor_map":
                        buf, addr = self.tensor_map(value)
                        keep.append(buf)
                        ptrs.append(addr)
                    else:
                        x = _CTYPES[kind](value)
                        keep.append(x)
                        ptrs.append(ctypes.addressof(x))
                params = (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)
                key = (ordinal, p.variant["name"], l.kernel)
                if l.shared_bytes > 48 * 1024 and self.smem_set.get(key, 0) < l.shared_bytes:
                    self.check(self.lib.cuFuncSetAttribute(fn, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l.shared_bytes),
                               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
                    self.smem_set[key] = l.shared_bytes
                self.check(self.lib.cuLaunchKernel(fn, *l.grid, *l.block, l.shared_bytes, ctypes.c_void_p(stream), params, None),
                           f"cuLaunchKernel({l.kernel})")
        finally:
            self._pop(pushed)


_driver = None


def _check_arch(torch, device):
    major, minor = torch.cuda.get_device_capability(device)
    arch = MANIFEST["arch"]
    digits = arch[3:].rstrip("af")
    want = (int(digits[:-1]), int(digits[-1]))
    specific = arch.endswith(("a", "f"))
    ok = (major, minor) == want if specific else (major == want[0] and minor >= want[1])
    if not ok:
        raise ArtifactError(f"this artifact's CUBINs are for {arch}; {torch.cuda.get_device_name(device)} is sm_{major}{minor}. "
                            "Export again from a search on this GPU's architecture.")


def attention(q, k, v, causal=False, scale=None):
    """O = softmax(scale * Q K^T (+ causal mask, top-left aligned as PyTorch's is_causal)) V,
    with scale 1/sqrt(head_dim) by default. Returns a new contiguous tensor shaped like q.
    Inputs the chosen variant reads through TMA tensor maps are made contiguous first (a
    copy when they are not)."""
    global _driver
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ArtifactError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    # A variant that reads a tensor through a TMA tensor map needs it contiguous: copy those
    # that are not (plan() alone refuses them, as it cannot copy).
    first = plan(q, k, v, causal, scale, copies_made=True)  # checks before allocating
    mapped = {a["tensor_map"]["param"] for l in first.variant["launches"] for a in (l.get("args") or []) if "tensor_map" in a}
    q, k, v = (t if name not in mapped or t.is_contiguous() else t.contiguous() for name, t in zip(("q", "k", "v"), (q, k, v)))
    _check_arch(torch, q.device)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    sizes = first.scratch
    # Scratch from PyTorch's caching allocator (256-byte aligned), alive until the launch is queued.
    buffers = {name: torch.empty(n, dtype=torch.uint8, device=q.device) for name, n in sizes}
    p = plan(q, k, v, causal, scale, out=o, scratch={name: b.data_ptr() for name, b in buffers.items()})
    if _driver is None:
        _driver = _Driver()
    stream = torch.cuda.current_stream(q.device).cuda_stream
    _driver.launch(q.device.index if q.device.index is not None else torch.cuda.current_device(), p, stream)
    return o

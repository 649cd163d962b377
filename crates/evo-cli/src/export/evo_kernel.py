"""Attention forward from an evo artifact, callable on PyTorch tensors.

Written by `evo export` next to manifest.json and the CUBINs it describes. Needs only
PyTorch and the CUDA driver (libcuda.so.1): no evo, no Rust, no compiler. The CUBIN is
loaded with cuModuleLoadData into the device's primary context (the one PyTorch uses)
and launched with cuLaunchKernel on PyTorch's current stream.

    import sys; sys.path.insert(0, "path/to/artifact")
    from evo_kernel import attention
    o = attention(q, k, v, causal=False)   # q: (batch, heads, seq_q, head_dim), k, v: (batch, heads, seq_kv, head_dim)

`plan()` does every check and computes the launch (variant, grid, block, shared memory,
packed arguments) without touching a GPU or importing torch; `attention()` adds the
driver calls.
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
if MANIFEST.get("schema") != "evo-artifact-1":
    raise ImportError(f"{_DIR}/manifest.json has schema {MANIFEST.get('schema')!r}; this evo_kernel.py reads 'evo-artifact-1'")
if MANIFEST["problem"] != "sdpa_fwd":
    raise ImportError(f"this artifact is for problem {MANIFEST['problem']!r}; evo_kernel.attention implements sdpa_fwd")

# str(tensor.dtype) -> the artifact's DTYPE.
DTYPES = {"torch.float16": "f16", "torch.bfloat16": "bf16"}
_CTYPES = {"pointer": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}
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


def launch_dims(variant, shape):
    """(grid, block, shared_bytes) of a variant (manifest entry) for a shape (dict of the
    run-time variables, e.g. BATCH, HEADS, SEQ_Q, SEQ_KV)."""
    rule = variant["launch"]
    env = dict(rule["constants"])
    env.update(shape)
    grid = [eval_expr(e, env) for e in rule["grid"]]
    block = [eval_expr(e, env) for e in rule["block"]]
    smem = eval_expr(rule["shared_bytes"], env)
    limits = [(grid[0], 2**31 - 1, "grid.x"), (grid[1], 65535, "grid.y"), (grid[2], 65535, "grid.z")]
    for value, top, what in limits:
        if not 1 <= value <= top:
            raise ArtifactError(f"{what} = {value} is out of range 1..{top} for shape {shape}")
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


class Plan:
    """Everything a launch needs: variant, geometry and the packed ABI arguments."""

    def __init__(self, variant, grid, block, shared_bytes, args, out_shape):
        self.variant, self.grid, self.block, self.shared_bytes = variant, grid, block, shared_bytes
        self.args = args  # [(name, kind, value)] in ABI order
        self.out_shape = out_shape

    def as_dict(self):
        return {"variant": self.variant["name"], "grid": self.grid, "block": self.block,
                "shared_bytes": self.shared_bytes, "args": [list(a) for a in self.args]}


def plan(q, k, v, causal=False, scale=None, out=None):
    """Checks q, k, v (and out, if given) and computes the launch, without a GPU.

    q: (batch, heads, seq_q, head_dim); k, v: (batch, heads, seq_kv, head_dim); same
    dtype (float16 or bfloat16, as the artifact was built) and CUDA device; last dim
    contiguous; other strides multiples of 8 elements, data 16-byte aligned. `out` is
    the output tensor (batch, heads, seq_q, head_dim); None plans for a contiguous one
    at address 0."""
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
    grid, block, smem = launch_dims(variant, shape)
    if out is None:
        o_strides, o_ptr = (H * SQ * D, SQ * D, D, 1), 0
    else:
        if tuple(out.shape) != (B, H, SQ, D) or str(out.dtype) != str(q.dtype):
            raise ArtifactError(f"out must be {(B, H, SQ, D)} {q.dtype}; got {tuple(out.shape)} {out.dtype}")
        o_strides, o_ptr = tuple(out.stride()), out.data_ptr()
    values = {"batch": B, "heads": H, "seq_q": SQ, "seq_kv": SKV,
              "softmax_scale": float(1.0 / math.sqrt(D) if scale is None else scale)}
    for name, strides, ptr in [(n, tuple(t.stride()), t.data_ptr()) for n, t in zip(names, (q, k, v))] + [("o", o_strides, o_ptr)]:
        if strides[3] != 1 and D > 1:
            raise ArtifactError(f"{name} must be contiguous in its last dimension (stride {strides[3]}); call .contiguous()")
        for dim, s in zip(("batch", "head", "seq"), strides[:3]):
            if s % 8 != 0 or s < 0:
                raise ArtifactError(f"{name}'s {dim} stride is {s} elements; the kernel needs non-negative multiples of 8 (16 bytes); call .contiguous()")
            values[f"{name}_{dim}_stride"] = s
        if ptr % 16 != 0:
            raise ArtifactError(f"{name}'s data is not 16-byte aligned (address {ptr:#x}); call .contiguous() or .clone()")
        values[name] = ptr
    args = []
    for p in MANIFEST["abi"]["params"]:
        if p["name"] not in values:
            raise ArtifactError(f"the ABI parameter {p['name']} ({p['ctype']}) is unknown to this evo_kernel.py")
        args.append((p["name"], p["kind"], values[p["name"]]))
    return Plan(variant, grid, block, smem, args, (B, H, SQ, D))


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
        self.check(L.cuInit(0), "cuInit")
        self.contexts, self.functions, self.smem_set = {}, {}, {}

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

    def function(self, ordinal, variant):
        key = (ordinal, variant["name"])
        if key not in self.functions:
            path = os.path.join(_DIR, variant["cubin_file"])
            with open(path, "rb") as f:
                image = f.read()
            if hashlib.sha256(image).hexdigest() != MANIFEST["files"][variant["cubin_file"]]:
                raise RuntimeError(f"{path} does not match the SHA-256 in manifest.json; the artifact was modified")
            module, fn = ctypes.c_void_p(), ctypes.c_void_p()
            pushed = self._push(ordinal)
            try:
                self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), f"cuModuleLoadData({variant['cubin_file']})")
                self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, variant["launch"]["kernel"].encode()), "cuModuleGetFunction")
            finally:
                self._pop(pushed)
            self.functions[key] = fn
        return self.functions[key]

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
        fn = self.function(ordinal, p.variant)
        values = [_CTYPES[kind](value) for _, kind, value in p.args]
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(x) for x in values])
        pushed = self._push(ordinal)
        try:
            key = (ordinal, p.variant["name"])
            if p.shared_bytes > 48 * 1024 and self.smem_set.get(key, 0) < p.shared_bytes:
                self.check(self.lib.cuFuncSetAttribute(fn, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, p.shared_bytes),
                           "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
                self.smem_set[key] = p.shared_bytes
            self.check(self.lib.cuLaunchKernel(fn, *p.grid, *p.block, p.shared_bytes, ctypes.c_void_p(stream), params, None),
                       "cuLaunchKernel")
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
    with scale 1/sqrt(head_dim) by default. Returns a new contiguous tensor shaped like q."""
    global _driver
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ArtifactError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    plan(q, k, v, causal, scale)  # checks before allocating
    _check_arch(torch, q.device)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    p = plan(q, k, v, causal, scale, out=o)
    if _driver is None:
        _driver = _Driver()
    stream = torch.cuda.current_stream(q.device).cuda_stream
    _driver.launch(q.device.index if q.device.index is not None else torch.cuda.current_device(), p, stream)
    return o

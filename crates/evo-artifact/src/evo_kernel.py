"""Attention forward from an evo artifact, a drop-in for PyTorch's
torch.nn.functional.scaled_dot_product_attention.

Written by `evo export` next to manifest.json and the CUBINs it describes. Needs only
PyTorch and the CUDA driver (libcuda.so.1): no evo, no Rust, no compiler.

    import sys; sys.path.insert(0, "path/to/artifact")
    import evo_kernel
    o = evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=True)
    evo_kernel.stats()   # {'evo': calls the kernels served, 'fallback': {reason: calls}, 'copies': {...}}

What the artifact's kernels do not cover (REASONS: a mask, dropout, grouped-query heads,
another dtype, head dim or causal setting, a CPU tensor or another GPU architecture, a
shape out of the kernels' range, inputs that require grad under grad mode) goes to
torch.nn.functional.scaled_dot_product_attention with the same arguments, counted by
reason in stats(); set_strict(True) or EVO_KERNEL_STRICT=1 raises FallbackError naming the
reason instead. So does a call whose dispatch entry (its shape, or the nearest searched
one) the export marked `defer`: the search measured evo's kernel there less than
`dispatch.min_speedup` times faster than PyTorch's SDPA, or slower (reason "slower";
`evo export --keep-slower` marks none).

A call is planned once per (dtypes, devices, shapes, strides, causal, scale): the variant
(the manifest's dispatch rule), every kernel's launch geometry, every argument in ctypes
storage behind a prebuilt kernelParams array, the tensor maps, the CUBIN loaded into the
device's primary context (PyTorch's). The plan is cached; a call then costs a dictionary
look-up, the output allocation (and one scratch workspace when the variant has scratch)
from PyTorch's caching allocator, the data pointers written into the plan's argument
slots (a tensor map gets its new global address with cuTensorMapReplaceAddress) and
cuLaunchKernel of each kernel on PyTorch's current stream. Inputs the family declares
contiguous (manifest variant `contiguous`) are made contiguous first, and so is any input
whose last dimension is strided, whose other strides are not multiples of 8 elements or
whose data is not 16-byte aligned; every other input is passed with its own strides
(copies are counted in stats()['copies']).

It is also the torch op OP (torch.ops.evo.sdpa_<artifact id>), registered with
torch.library.custom_op and a fake implementation, so torch.compile(fullgraph=True)
traces it and CUDA-graph capture records its launches (call it once before capturing:
the first call of a plan loads the CUBIN). In eager mode scaled_dot_product_attention()
calls the implementation directly rather than through the op: the dispatcher adds its own
cost to every call (bench.py times both); under torch.compile it goes through the op.

register_transformers() makes it Hugging Face transformers' attn_implementation="evo".
attention(q, k, v, causal=False, scale=None) is a short alias. plan() computes a call's
launches without a GPU or torch (tests read it). kernel_launcher(q, k, v, is_causal, scale)
returns the plan's launches alone, for benchmarks (bench.py's kernel time); both reach the
kernels of a call that goes to PyTorch's SDPA as "slower".
"""
import ast
import ctypes
import hashlib
import json
import math
import os
import threading

try:
    import torch as _torch
except ImportError:  # plan() works without torch
    _torch = None

_DIR = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_DIR, "manifest.json")) as _f:
    MANIFEST = json.load(_f)
if MANIFEST.get("schema") != "evo-artifact-3":
    raise ImportError(f"{_DIR}/manifest.json has schema {MANIFEST.get('schema')!r}; this evo_kernel.py reads 'evo-artifact-3'")
# sdpa_fwd_fp8_e2e takes sdpa_fwd's arguments (fp16/bf16 q, k, v; its kernels quantize to FP8).
if MANIFEST["problem"] not in ("sdpa_fwd", "sdpa_fwd_fp8_e2e"):
    raise ImportError(f"this artifact is for problem {MANIFEST['problem']!r}; evo_kernel implements sdpa_fwd and sdpa_fwd_fp8_e2e")

# str(tensor.dtype) -> the artifact's DTYPE.
DTYPES = {"torch.float16": "f16", "torch.bfloat16": "bf16"}
_TORCH_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
_ELEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "e4m3": 1, "u8": 1}
# CUtensorMapDataType and CUtensorMapSwizzle values (cuda.h).
_TMAP_DTYPE = {"u8": 0, "e4m3": 0, "f16": 6, "f32": 7, "bf16": 9}
_TMAP_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
_VARIANTS = {v["name"]: v for v in MANIFEST["variants"]}
_PARAMS = MANIFEST["abi"]["params"]
_KINDS = {p["name"]: p["kind"] for p in _PARAMS}
# (DTYPE, HEAD_DIM, CAUSAL) of every kernel the artifact has.
_SPECS = {(e["specialization"]["DTYPE"], e["specialization"]["HEAD_DIM"], e["specialization"]["CAUSAL"])
          for e in MANIFEST["dispatch"]["table"]}
# The artifact's identity (the hashes of its files): names its torch op.
ID = hashlib.sha256(json.dumps(MANIFEST["files"], sort_keys=True).encode()).hexdigest()[:12]
OP = f"evo::sdpa_{ID}"
# Scratch buffers lie in one workspace, each at a 256-byte aligned offset (as kernel.h).
_SCRATCH_ALIGN = 256
# Plans kept (a new shape beyond this drops the oldest plan).
_MAX_PLANS = 1024

# Why a call goes to PyTorch's SDPA instead of the artifact's kernels.
REASONS = {
    "mask": "attn_mask is given (the kernels take no mask)",
    "dropout": "dropout_p > 0 (the kernels have no dropout)",
    "gqa": "key/value have other head counts than query (grouped-query attention)",
    "dtype": "a dtype the artifact has no kernel for, or mixed dtypes",
    "head_dim": "a head dim the artifact has no kernel for, or differing head dims",
    "causal": "no kernel for this is_causal at this dtype and head dim",
    "device": "a tensor is not on a CUDA device, or the tensors are on different devices",
    "arch": "the GPU's architecture is not the CUBINs'",
    "shape": "not (batch, heads, seq, head_dim) tensors of fitting sizes, or sizes beyond the launch limits",
    "grad": "an input requires grad under grad mode (the kernels have no backward)",
    "slower": "the run measured evo's kernel less than the export's min_speedup times faster than PyTorch's SDPA (or slower) at this shape or the nearest searched one",
}


class ArtifactError(ValueError):
    """A call this artifact's kernels cannot serve (see the message), from plan()."""


class FallbackError(ArtifactError):
    """Raised in strict mode instead of falling back to PyTorch's SDPA; `reason` is a
    key of REASONS."""

    def __init__(self, reason, detail):
        super().__init__(f"evo_kernel would fall back to torch SDPA ({reason}: {REASONS[reason]}): {detail}")
        self.reason = reason


# ---- launch expressions (evaluated once per plan) -----------------------------------------

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


class _OutOfRange(Exception):
    """A launch dimension or argument beyond its limit (the call falls back: shape)."""


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
            raise _OutOfRange(f"kernel {rule['kernel']}: {what} = {value} is out of range 1..{top} for shape {shape}")
    return grid, block, smem


def _nearness(a, b):
    return sum(abs(math.log2(a[k] / b[k])) for k in b)


def dispatch_entry(spec, shape):
    """The dispatch table's entry for a specialization (dict: DTYPE, HEAD_DIM, CAUSAL) and
    run-time shape, by the manifest's dispatch rule (see manifest.json `dispatch.rule`)."""
    d = MANIFEST["dispatch"]
    entries = [e for e in d["table"] if e["specialization"] == spec]
    if not entries:
        raise ArtifactError(f"this artifact has no kernel for {json.dumps(spec, sort_keys=True)}; it has: {_have()}")
    if d["mode"] == "specialization":
        return entries[0]
    for e in entries:
        if e["shape"] == shape:
            return e
    return min(entries, key=lambda e: _nearness(shape, e["shape"]))  # min keeps the first of ties


def select(spec, shape):
    """The variant of dispatch_entry(spec, shape)."""
    return _VARIANTS[dispatch_entry(spec, shape)["variant"]]


def _have():
    return ", ".join(f"{_TORCH_DTYPE_NAMES.get(d, d)} head_dim {h}{' causal' if c else ''}" for d, h, c in sorted(_SPECS))


def scratch_sizes(variant, env):
    """[(name, bytes)] of a variant's scratch buffers for `env` (constants and shape)."""
    out = []
    for s in variant.get("scratch", []):
        n = eval_expr(s["len"], env)
        if n < 1:
            raise ArtifactError(f"scratch {s['name']}: {n} elements")
        out.append((s["name"], n * _ELEM_BYTES[s["elem"]]))
    return out


# ---- planning: what a call with these tensors needs (no GPU, no torch) --------------------

class _Fallback:
    """A call the kernels do not serve: `reason` (a REASONS key) and what about it. A call
    they serve slower than PyTorch's SDPA ("slower") keeps its `plan` (the _Plan of the
    kernels, for kernel_launcher and plan()), and its `variant`; else both are None."""
    __slots__ = ("reason", "detail", "plan")

    def __init__(self, reason, detail, plan=None):
        self.reason, self.detail, self.plan = reason, detail, plan

    @property
    def variant(self):
        return self.plan.variant if self.plan is not None else None


def _dense_like(shape, like):
    """Dense strides for `shape` in the dimension order of the strides `like` (outermost:
    the largest; ties in dimension order), or None where that order does not end in the last
    dimension."""
    order = sorted(range(len(shape)), key=lambda i: (-like[i], i))
    if order[-1] != len(shape) - 1:
        return None
    strides, acc = [0] * len(shape), 1
    for i in reversed(order):
        strides[i] = acc
        acc *= shape[i]
    return tuple(strides)


def _contiguous_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.insert(0, acc)
        acc *= n
    return tuple(strides)


def _is_contiguous(shape, strides):
    """Row-major without gaps; strides of size-1 dimensions do not matter (as torch's)."""
    acc = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != acc:
            return False
        acc *= n
    return True


def _apart(shape, strides):
    """Whether no two elements share memory (the ABI's "strides that keep the elements apart"):
    taken by increasing stride, each dimension of more than one element steps over the whole
    extent of the ones before it."""
    extent = 1
    for n, st in sorted(((n, st) for n, st in zip(shape, strides) if n > 1), key=lambda d: d[1]):
        if st < extent:
            return False
        extent = st * (n - 1) + extent
    return True


def _arch_ok(capability):
    arch = MANIFEST["arch"]
    digits = arch[3:].rstrip("af")
    want = (int(digits[:-1]), int(digits[-1]))
    if arch.endswith(("a", "f")):
        return tuple(capability) == want
    return capability[0] == want[0] and capability[1] >= want[1]


def _decide(q, k, v, is_causal, scale, capability=None):
    """The plan of a call with tensors like q, k, v (their dtype, device, shape and strides:
    not their data), or the _Fallback saying why the kernels do not serve it (for a dispatch
    entry marked defer: "slower", holding the plan). `capability(device)` gives
    the device's compute capability (None: not checked)."""
    names = ("q", "k", "v")
    ts = (q, k, v)
    for name, t in zip(names, ts):
        if not t.is_cuda:
            return _Fallback("device", f"{name} is on {t.device}; the kernels run on CUDA devices")
    if len({str(t.device) for t in ts}) != 1:
        return _Fallback("device", f"q, k, v are on different devices: {q.device}, {k.device}, {v.device}")
    dts = [str(t.dtype) for t in ts]
    if len(set(dts)) != 1:
        return _Fallback("dtype", f"q, k, v have different dtypes: {', '.join(dts)}")
    dtype = DTYPES.get(dts[0])
    if dtype is None or not any(s[0] == dtype for s in _SPECS):
        return _Fallback("dtype", f"dtype {dts[0]}; this artifact has kernels for {_have()}")
    if any(len(t.shape) != 4 for t in ts):
        return _Fallback("shape", f"the kernels take 4-D (batch, heads, seq, head_dim) tensors; got shapes "
                                  f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, SQ, D = (int(x) for x in q.shape)
    Bk, Hk, SKV, Dk = (int(x) for x in k.shape)
    Bv, Hv, SKVv, Dv = (int(x) for x in v.shape)
    if Bk != B or Bv != B or SKVv != SKV:
        return _Fallback("shape", f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
                                  "the kernels take q (batch, heads, seq_q, head_dim) and k, v (batch, heads, seq_kv, head_dim)")
    if Hk != H or Hv != H:
        return _Fallback("gqa", f"query has {H} heads, key {Hk} and value {Hv}")
    if Dk != D or Dv != D:
        return _Fallback("head_dim", f"head dims differ: q {D}, k {Dk}, v {Dv}")
    if not any(s[0] == dtype and s[1] == D for s in _SPECS):
        return _Fallback("head_dim", f"head dim {D} in {dts[0]}; this artifact has kernels for {_have()}")
    if (dtype, D, is_causal) not in _SPECS:
        return _Fallback("causal", f"is_causal={is_causal} at {dts[0]} head dim {D}; this artifact has kernels for {_have()}")
    for what, x in (("batch", B), ("heads", H), ("seq_q", SQ), ("seq_kv", SKV)):
        if not 1 <= x <= 2**31 - 1:
            return _Fallback("shape", f"{what} = {x} is out of the kernels' range (1 .. 2^31-1)")
    if capability is not None:
        cap = capability(q.device)
        if not _arch_ok(cap):
            return _Fallback("arch", f"the CUBINs are for {MANIFEST['arch']}; {q.device} is sm_{cap[0]}{cap[1]}")
    spec = {"CAUSAL": bool(is_causal), "DTYPE": dtype, "HEAD_DIM": D}
    shape = {"BATCH": B, "HEADS": H, "SEQ_KV": SKV, "SEQ_Q": SQ}
    entry = dispatch_entry(spec, shape)
    variant = _VARIANTS[entry["variant"]]
    # Layout: the variant's declared tensors contiguous, every tensor's last dimension
    # contiguous, its other strides multiples of 8 elements (16 bytes) and its elements apart
    # (an expand()ed tensor is not); else a copy. A dimension of one element has no stride to
    # speak of: it gets its contiguous one.
    declared = variant.get("contiguous", [])
    copies, strides = [], {}
    q_order = tuple(int(x) for x in q.stride())  # the caller's q, before any copy
    for name, t in zip(names, ts):
        sh = tuple(int(x) for x in t.shape)
        st = tuple(c if n == 1 else int(x) for n, x, c in zip(sh, t.stride(), _contiguous_strides(sh)))
        if ((name in declared and not _is_contiguous(sh, st)) or (st[3] != 1 and D > 1)
                or any(s % 8 != 0 or s < 0 for s in st[:3]) or not _apart(sh, st)):
            copies.append(name)
            st = _contiguous_strides(sh)
        strides[name] = st
    # The output is dense in the caller's q's dimension order, as PyTorch's SDPA makes it: a
    # model's (batch, seq, heads, dim) views get an output its transpose(1, 2).contiguous()
    # leaves as it is (no copy). Contiguous where the variant declares o so, or where that
    # order does not end in the head dimension or its strides would not be 16-byte multiples.
    out_shape = (B, H, SQ, D)
    dense = None if "o" in declared or D % 8 else _dense_like(out_shape, q_order)
    strides["o"] = dense or _contiguous_strides(out_shape)
    env = dict(variant["constants"])
    env.update(shape)
    values = {"batch": B, "heads": H, "seq_q": SQ, "seq_kv": SKV,
              "softmax_scale": float(1.0 / math.sqrt(D) if scale is None else scale)}
    for name, st in strides.items():
        for dim, s in zip(("batch", "head", "seq"), st[:3]):
            values[f"{name}_{dim}_stride"] = s
    for p in _PARAMS:
        if p["kind"] != "pointer" and p["name"] not in values:
            raise ArtifactError(f"the ABI parameter {p['name']} ({p['ctype']}) is unknown to this evo_kernel.py")
    tensor_shapes = {"q": (B, H, SQ, D), "k": (B, H, SKV, D), "v": (B, H, SKV, D), "o": (B, H, SQ, D)}
    try:
        sizes = scratch_sizes(variant, env)
        launches = []
        for rule in variant["launches"]:
            grid, block, smem = launch_dims(rule, env)
            args = []  # (label, kind, what): what is a tensor name, ("scratch", name), a number or a map
            for a in rule.get("args") or [{"param": p["name"]} for p in _PARAMS]:
                if "param" in a:
                    name, kind = a["param"], _KINDS[a["param"]]
                    args.append((name, kind, name if kind == "pointer" else values[name]))
                elif "scratch" in a:
                    args.append((a["scratch"], "pointer", ("scratch", a["scratch"])))
                elif "i32" in a or "i64" in a:
                    kind = "i32" if "i32" in a else "i64"
                    x = eval_expr(a[kind], env)
                    if kind == "i32" and not -2**31 <= x < 2**31:
                        raise _OutOfRange(f"kernel {rule['kernel']}: i32 argument {a[kind]} = {x} does not fit in 32 bits")
                    args.append((a[kind], kind, x))
                elif "tensor_map" in a:
                    t = a["tensor_map"]
                    dims = [eval_expr(e, env) for e in t["dims"]]
                    elem = _ELEM_BYTES[t["elem"]]
                    if "scratch" in t:
                        # A scratch buffer: contiguous by construction; the map stays inside it.
                        tensor, label = ("scratch", t["scratch"]), t["scratch"]
                        have = dict(sizes).get(label)
                        if have is None or math.prod(dims) * elem > have:
                            raise ArtifactError(f"tensor map over scratch {label}: dims {dims} of {elem}-byte elements "
                                                f"do not fit its {have} bytes")
                    else:
                        tensor = label = t["param"]
                        if math.prod(dims) != math.prod(tensor_shapes[label]):
                            raise ArtifactError(f"tensor map over {label}: dims {dims} do not cover its {tensor_shapes[label]} elements")
                        if (not t.get("strides") and label != "o" and label not in copies
                                and not _is_contiguous(tensor_shapes[label], strides[label])):
                            raise ArtifactError(f"variant {variant['name']} reads {label} through a TMA tensor map but does not declare it contiguous")
                    if t.get("strides"):
                        # The call's own strides (ABI parameters, in elements).
                        tmap_strides = [values[p] * elem for p in t["strides"]]
                    else:
                        tmap_strides, s = [], elem
                        for n in dims[:-1]:
                            s *= n
                            tmap_strides.append(s)
                    args.append((f"tensor_map({label})", "tensor_map",
                                 {"tensor": tensor, "elem": t["elem"], "dims": dims, "strides_bytes": tmap_strides,
                                  "box": [eval_expr(e, env) for e in t["box_dims"]], "swizzle_bytes": t["swizzle_bytes"]}))
                else:
                    raise ArtifactError(f"kernel {rule['kernel']}: argument {a} is unknown to this evo_kernel.py")
            launches.append((rule["kernel"], grid, block, smem, args))
    except _OutOfRange as e:
        return _Fallback("shape", str(e))
    # A contiguous output of a contiguous q: torch.empty_like(q) makes it (cheaper than
    # torch.empty_strided with a shape, strides, dtype and device to parse).
    out_like_q = strides["q"] == strides["o"] == _contiguous_strides(out_shape)
    plan = _Plan(variant, launches, sizes, out_shape, strides["o"], tuple(copies), out_like_q)
    slower = entry.get("defer")
    if slower:
        # Decided here, once per plan: the op's calls then take the fallback path as cheaply
        # as any other, and the plan stays reachable for kernel_launcher and plan().
        where = "this shape" if entry["shape"] == shape else f"the nearest searched shape {entry['shape']}"
        return _Fallback("slower", f"the run measured PyTorch's SDPA at {slower['baseline_us']:.2f} us and evo's "
                                   f"{variant['name']} at {slower['variant_us']:.2f} us on {where} (evo's kernels serve "
                                   f"shapes where they measured at least {MANIFEST['dispatch'].get('min_speedup', 1)}x faster)",
                         plan)
    return plan


class Launch:
    """One kernel launch as plan() describes it: name, geometry and arguments
    [(name, kind, value)], kind one of pointer, i32, i64, f32 or tensor_map."""

    def __init__(self, kernel, grid, block, shared_bytes, args):
        self.kernel, self.grid, self.block, self.shared_bytes, self.args = kernel, grid, block, shared_bytes, args

    def as_dict(self):
        return {"kernel": self.kernel, "grid": self.grid, "block": self.block,
                "shared_bytes": self.shared_bytes, "args": [list(a) for a in self.args]}


class Plan:
    """What plan() returns: the variant, its launches with every argument's value, its
    scratch buffers [(name, bytes)], the inputs a call copies to contiguous first, and
    `slower`: why scaled_dot_product_attention calls PyTorch's SDPA instead (reason
    "slower"), or None."""

    def __init__(self, variant, launches, scratch, out_shape, copies, slower=None):
        self.variant, self.launches, self.scratch, self.out_shape, self.copies = variant, launches, scratch, out_shape, copies
        self.slower = slower

    def as_dict(self):
        return {"variant": self.variant["name"], "launches": [l.as_dict() for l in self.launches],
                "scratch": [list(s) for s in self.scratch], "copies": list(self.copies), "slower": self.slower}


def plan(q, k, v, causal=False, scale=None, scratch=None):
    """The launches of a call (kernel, geometry, every argument's value) without a GPU or
    torch, or ArtifactError saying why the kernels do not serve it. Pointers are the
    tensors' data_ptr() (the output's is 0; a copied input's is its original's), `scratch`
    {name: device address} (default 0). A call the op sends to PyTorch's SDPA as "slower"
    still gets its kernels' launches, with Plan.slower saying so."""
    p = _decide(q, k, v, bool(causal), scale)
    slower = None
    if isinstance(p, _Fallback):
        if p.plan is None:
            raise ArtifactError(p.detail)
        slower, p = p.detail, p.plan
    ptrs = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": 0}
    scratch = scratch or {}
    launches = []
    for kernel, grid, block, smem, args in p.launches:
        out = []
        for label, kind, what in args:
            if kind == "pointer":
                value = scratch.get(what[1], 0) if isinstance(what, tuple) else ptrs[what]
            elif kind == "tensor_map":
                value = {key: x for key, x in what.items() if key != "tensor"}
                t = what["tensor"]
                value["address"] = scratch.get(t[1], 0) if isinstance(t, tuple) else ptrs[t]
            else:
                value = what
            out.append((label, kind, value))
        launches.append(Launch(kernel, grid, block, smem, out))
    return Plan(p.variant, launches, p.scratch, p.out_shape, p.copies, slower)


# ---- the CUDA driver, through ctypes ------------------------------------------------------

_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# The compiled cluster's shape (__cluster_dims__), and the permission a cluster of more than 8
# CTAs needs to launch (sm_90 allows up to 16 as a non-portable size).
_CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER = (11, 12, 13)
_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


class _Driver:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
            # The per-call functions keep the GIL (like PyTorch's own launches): no thread
            # switch in the middle of a launch, and no release/acquire per call.
            self.fast = ctypes.PyDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"cannot load the CUDA driver (libcuda.so.1): {e}") from e
        L, vp, u = self.lib, ctypes.c_void_p, ctypes.c_uint
        L.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
        L.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
        L.cuFuncSetAttribute.argtypes = [vp, ctypes.c_int, ctypes.c_int]
        L.cuFuncGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, vp]
        L.cuCtxPushCurrent_v2.argtypes = [vp]
        L.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(vp)]
        L.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(vp), ctypes.c_int]
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        L.cuTensorMapEncodeTiled.argtypes = [vp, ctypes.c_int, u, vp, u64p, u64p, u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        # Called with ctypes objects only (no conversions per call).
        self.launch = self.fast.cuLaunchKernel
        self.get_current = self.fast.cuCtxGetCurrent
        self.replace_address = self.fast.cuTensorMapReplaceAddress
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

    def push(self, ordinal):
        """Makes the device's primary context current; False when it already was (as on
        a PyTorch thread): then nothing is pushed, which keeps CUDA-graph capture happy."""
        ctx, cur = self.context(ordinal), ctypes.c_void_p()
        self.check(self.get_current(ctypes.byref(cur)), "cuCtxGetCurrent")
        if cur.value == ctx.value:
            return False
        self.check(self.lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        return True

    def pop(self, pushed):
        if pushed:
            self.check(self.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")

    def function(self, ordinal, variant, kernel, shared_bytes):
        """The CUfunction of a variant's kernel on a device (its CUBIN loaded once, checked
        against the manifest's SHA-256), allowed `shared_bytes` of dynamic shared memory."""
        key = (ordinal, variant["name"])
        pushed = self.push(ordinal)
        try:
            if key not in self.modules:
                path = os.path.join(_DIR, variant["cubin_file"])
                with open(path, "rb") as f:
                    image = f.read()
                if hashlib.sha256(image).hexdigest() != MANIFEST["files"][variant["cubin_file"]]:
                    raise RuntimeError(f"{path} does not match the SHA-256 in manifest.json; the artifact was modified")
                module = ctypes.c_void_p()
                self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), f"cuModuleLoadData({variant['cubin_file']})")
                self.modules[key] = module
            fkey = key + (kernel,)
            if fkey not in self.functions:
                fn = ctypes.c_void_p()
                self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), self.modules[key], kernel.encode()), f"cuModuleGetFunction({kernel})")
                self._allow_compiled_cluster(fn, kernel)
                self.functions[fkey] = fn
            fn = self.functions[fkey]
            if shared_bytes > 48 * 1024 and self.smem_set.get(fkey, 0) < shared_bytes:
                self.check(self.lib.cuFuncSetAttribute(fn, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes),
                           "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
                self.smem_set[fkey] = shared_bytes
            return fn
        finally:
            self.pop(pushed)


    def _allow_compiled_cluster(self, fn, kernel):
        """A kernel compiled with a cluster of more than 8 CTAs launches only with the
        non-portable cluster permission (a driver or GPU without clusters refuses the query:
        no compiled cluster)."""
        ctas = 1
        for attribute in _CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER:
            v = ctypes.c_int(0)
            if self.lib.cuFuncGetAttribute(ctypes.byref(v), attribute, fn) != 0:
                return
            ctas *= max(v.value, 0)
        if ctas > 8:
            self.check(self.lib.cuFuncSetAttribute(fn, _CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                       f"cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED) of {kernel}")


_driver = None


class _TensorMap:
    """A 128-byte CUtensorMap in a 128-byte aligned buffer, passed by value to a kernel,
    re-pointed at each call's tensor (cuTensorMapReplaceAddress when the address moved)."""

    def __init__(self, desc):
        self.tensor = desc["tensor"]  # "q", "k", "v", "o" or ("scratch", name)
        self.buf = ctypes.create_string_buffer(256)
        self.addr = (ctypes.addressof(self.buf) + 127) // 128 * 128
        rank = len(desc["dims"])
        self.rank = rank
        self.elem = desc["elem"]
        self.swizzle = _TMAP_SWIZZLE[desc["swizzle_bytes"]]
        self.dims = (ctypes.c_uint64 * rank)(*desc["dims"])
        self.strides = (ctypes.c_uint64 * max(rank - 1, 1))(*(desc["strides_bytes"] or [0]))
        self.box = (ctypes.c_uint32 * rank)(*desc["box"])
        self.ones = (ctypes.c_uint32 * rank)(*([1] * rank))
        self.last = None

    def point(self, address):
        if address == self.last:
            return
        d = _driver
        if self.last is None:
            # No interleave, the given swizzle, L2 promotion 128 B, out-of-bounds elements zero.
            d.check(d.lib.cuTensorMapEncodeTiled(ctypes.c_void_p(self.addr), _TMAP_DTYPE[self.elem], self.rank,
                                                 ctypes.c_void_p(address), self.dims, self.strides, self.box, self.ones,
                                                 0, self.swizzle, 2, 0), "cuTensorMapEncodeTiled")
        else:
            d.check(d.replace_address(ctypes.c_void_p(self.addr), ctypes.c_void_p(address)), "cuTensorMapReplaceAddress")
        self.last = address


class _Plan:
    """Everything a call with one key needs, made once: the variant, the launches
    [(kernel, grid, block, shared_bytes, args)], scratch [(name, bytes)], the output's shape
    and strides, the inputs to copy; on the first call on a device, the ctypes argument
    storage."""

    def __init__(self, variant, launches, scratch, out_shape, out_strides, copies, out_like_q=False):
        self.variant, self.launches, self.scratch, self.out_shape, self.copies = variant, launches, scratch, out_shape, copies
        self.out_strides, self.out_like_q = out_strides, out_like_q
        offsets, total = [], 0
        for _, n in scratch:
            offsets.append(total)
            total += -(-n // _SCRATCH_ALIGN) * _SCRATCH_ALIGN
        self.offsets, self.workspace = offsets, total
        self.bound = None

    def bind(self, ordinal):
        """The ctypes storage of every argument (pointer slots q, k, v, o and scratch filled
        per call), one kernelParams array per launch pointing at it, the tensor maps, and
        each launch's cuLaunchKernel arguments with one shared stream slot."""
        global _driver
        if _driver is None:
            _driver = _Driver()
        b = _Bound()
        b.ctx = _driver.context(ordinal).value
        b.q, b.k, b.v, b.o = (ctypes.c_uint64() for _ in range(4))
        tensors = {"q": b.q, "k": b.k, "v": b.v, "o": b.o}
        scratch = {name: ctypes.c_uint64() for name, _ in self.scratch}
        b.scratch = [(scratch[name], off) for (name, _), off in zip(self.scratch, self.offsets)]
        b.tmaps = []
        b.scratch_tmaps = []  # (map, offset in the workspace)
        scratch_names = [name for name, _ in self.scratch]
        b.stream = ctypes.c_void_p()
        b.keep, b.calls = [], []
        ctype = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}
        for kernel, grid, block, smem, args in self.launches:
            fn = _driver.function(ordinal, self.variant, kernel, smem)
            addrs = []
            for _, kind, what in args:
                if kind == "pointer":
                    x = scratch[what[1]] if isinstance(what, tuple) else tensors[what]
                    addrs.append(ctypes.addressof(x))
                elif kind == "tensor_map":
                    m = _TensorMap(what)
                    if isinstance(m.tensor, tuple):
                        b.scratch_tmaps.append((m, self.offsets[scratch_names.index(m.tensor[1])]))
                    else:
                        b.tmaps.append(m)
                    addrs.append(m.addr)
                else:
                    x = ctype[kind](what)
                    b.keep.append(x)
                    addrs.append(ctypes.addressof(x))
            params = (ctypes.c_void_p * max(len(addrs), 1))(*addrs)
            u = ctypes.c_uint
            b.calls.append((kernel, (fn, u(grid[0]), u(grid[1]), u(grid[2]), u(block[0]), u(block[1]), u(block[2]),
                                     u(smem), b.stream, params, None)))
        b.keep.append(scratch)
        self.bound = b
        return b


class _Bound:
    """A plan's driver-side state on one device (see _Plan.bind)."""
    __slots__ = ("ctx", "q", "k", "v", "o", "scratch", "tmaps", "scratch_tmaps", "stream", "keep", "calls")


# ---- the call -----------------------------------------------------------------------------

_plans = {}
_counts = [0]       # calls the kernels served
_fallbacks = {}     # reason -> calls
_copies = {}        # tensor name -> copies made
_strict = [None]    # None: EVO_KERNEL_STRICT decides
_lock = threading.Lock()
_current = ctypes.c_void_p()
_current_ref = ctypes.byref(_current)
_capabilities = {}


def stats():
    """{'evo': calls the artifact's kernels served, 'fallback': {reason: calls that went to
    PyTorch's SDPA}, 'copies': {tensor: inputs copied to contiguous first}} since import
    or reset_stats()."""
    return {"evo": _counts[0], "fallback": dict(_fallbacks), "copies": dict(_copies)}


def reset_stats():
    _counts[0] = 0
    _fallbacks.clear()
    _copies.clear()


def set_strict(on=True):
    """Strict mode: a call the kernels do not serve raises FallbackError instead of
    running PyTorch's SDPA. None leaves it to the environment (EVO_KERNEL_STRICT=1).
    Returns the previous setting."""
    before = _strict[0]
    _strict[0] = on
    return before


def _is_strict():
    if _strict[0] is not None:
        return _strict[0]
    return os.environ.get("EVO_KERNEL_STRICT", "") not in ("", "0")


def _capability(device):
    cap = _capabilities.get(device)
    if cap is None:
        cap = _capabilities[device] = tuple(_torch.cuda.get_device_capability(device))
    return cap


def _fallback(reason, detail, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    if _is_strict():
        raise FallbackError(reason, detail)
    _fallbacks[reason] = _fallbacks.get(reason, 0) + 1
    kw = {"enable_gqa": True} if enable_gqa else {}
    return _torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)


def plan_of(q, k, v, is_causal=False, scale=None):
    """The cached plan (or the fallback decision) a call with these tensors uses: the
    same object for every call with the same dtypes, devices, shapes, strides, is_causal
    and scale."""
    key = (q.dtype, k.dtype, v.dtype, q.device, k.device, v.device, q.shape, k.shape, v.shape,
           q.stride(), k.stride(), v.stride(), is_causal, scale)
    p = _plans.get(key)
    if p is None:
        if len(_plans) >= _MAX_PLANS:
            del _plans[next(iter(_plans))]
        p = _plans[key] = _decide(q, k, v, bool(is_causal), scale, _capability)
    return p


def _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """The implementation: the artifact's kernels, or PyTorch's SDPA (counted)."""
    if attn_mask is not None:
        return _fallback("mask", "attn_mask is given", q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if dropout_p:
        return _fallback("dropout", f"dropout_p = {dropout_p}", q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if (q.requires_grad or k.requires_grad or v.requires_grad) and _torch.is_grad_enabled():
        return _fallback("grad", "an input requires grad and grad mode is on", q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    key = (q.dtype, k.dtype, v.dtype, q.device, k.device, v.device, q.shape, k.shape, v.shape,
           q.stride(), k.stride(), v.stride(), is_causal, scale)
    p = _plans.get(key)
    if p is None:
        p = plan_of(q, k, v, is_causal, scale)
    if p.__class__ is _Fallback:
        return _fallback(p.reason, p.detail, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if p.copies:
        q, k, v = (t.contiguous() if n in p.copies else t for n, t in (("q", q), ("k", k), ("v", v)))
        for n in p.copies:
            _copies[n] = _copies.get(n, 0) + 1
    qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if (qp | kp | vp) & 15:
        # Data not 16-byte aligned (a view at an odd offset): aligned copies, planned anew.
        for n, x in (("q", qp), ("k", kp), ("v", vp)):
            if x & 15:
                _copies[n] = _copies.get(n, 0) + 1
        q, k, v = (t.clone() if t.data_ptr() & 15 else t for t in (q, k, v))
        return _sdpa(q, k, v, None, 0.0, is_causal, scale, enable_gqa)
    device = q.device
    o = _torch.empty_like(q) if p.out_like_q else _torch.empty_strided(p.out_shape, p.out_strides, dtype=q.dtype, device=device)
    ws = _torch.empty(p.workspace, dtype=_torch.uint8, device=device) if p.workspace else None
    _launch(p, device.index, qp, kp, vp, o.data_ptr(), ws.data_ptr() if ws is not None else 0)
    _counts[0] += 1
    return o


def _launch(p, ordinal, qp, kp, vp, op, wsp):
    """The plan's kernels on the current stream of device `ordinal`: q, k, v and o at these
    addresses (contiguous as the plan says, 16-byte aligned), the workspace at wsp."""
    b = p.bound or p.bind(ordinal)
    stream = _raw_stream(ordinal)
    d = _driver
    with _lock:
        b.q.value, b.k.value, b.v.value, b.o.value = qp, kp, vp, op
        if p.workspace:
            for slot, off in b.scratch:
                slot.value = wsp + off
            for m, off in b.scratch_tmaps:
                m.point(wsp + off)
        for m in b.tmaps:
            m.point(qp if m.tensor == "q" else kp if m.tensor == "k" else vp)
        b.stream.value = stream
        d.get_current(_current_ref)
        pushed = _current.value != b.ctx and d.push(ordinal)
        try:
            for kernel, call in b.calls:
                r = d.launch(*call)
                if r:
                    d.check(r, f"cuLaunchKernel({kernel})")
        finally:
            if pushed:
                d.pop(pushed)


def kernel_launcher(q, k, v, is_causal=False, scale=None):
    """The artifact's kernels alone, for benchmarks: a function f(q, k, v, o=None) that
    launches the plan these tensors get (no checks, no allocation, no count) for inputs like
    these (same dtypes, shapes, strides), into `o` (q's shape and dtype, the plan's out_strides:
    dense in q's dimension order) or else one
    output allocated here, with one workspace allocated here. Raises FallbackError where the
    kernels do not serve such a call, ArtifactError where a call would copy an input first.
    A call the op sends to PyTorch's SDPA as "slower" gets its kernels: benchmarks time them."""
    p = plan_of(q, k, v, is_causal, scale)
    if p.__class__ is _Fallback:
        if p.plan is None:
            raise FallbackError(p.reason, p.detail)
        p = p.plan
    if p.copies:
        raise ArtifactError(f"kernel_launcher: a call copies {', '.join(p.copies)} to contiguous first; "
                            "pass tensors the kernels read as they are")
    out = _torch.empty_like(q) if p.out_like_q else _torch.empty_strided(p.out_shape, p.out_strides, dtype=q.dtype, device=q.device)
    ws = _torch.empty(p.workspace, dtype=_torch.uint8, device=q.device) if p.workspace else None
    ordinal = q.device.index

    def launch(q, k, v, o=None):
        o = out if o is None else o
        _launch(p, ordinal, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), ws.data_ptr() if ws is not None else 0)
        return o

    return launch


def _raw_stream(index):
    return _torch.cuda.current_stream(index).cuda_stream


def _not_compiling():
    return False


_compiling = _not_compiling
if _torch is not None:
    if hasattr(_torch, "_C") and hasattr(_torch._C, "_cuda_getCurrentRawStream"):
        _raw_stream = _torch._C._cuda_getCurrentRawStream  # noqa: F811  (the public API costs more per call)
    if hasattr(_torch, "compiler") and hasattr(_torch.compiler, "is_compiling"):
        _compiling = _torch.compiler.is_compiling


def _register_op():
    """The torch op OP with a fake implementation, or None (a torch without custom_op)."""
    if _torch is None or not hasattr(getattr(_torch, "library", None), "custom_op"):
        return None
    from typing import Optional
    Tensor = _torch.Tensor

    def sdpa(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], dropout_p: float,
             is_causal: bool, scale: Optional[float], enable_gqa: bool) -> Tensor:
        o = _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        # Contiguous, as the fake implementation says (a fallback's output may not be).
        return o if o.is_contiguous() else o.contiguous()

    try:
        op = _torch.library.custom_op(OP, mutates_args=())(sdpa)
    except RuntimeError:  # registered before in this process (the module was reloaded)
        namespace, name = OP.split("::")
        return getattr(getattr(_torch.ops, namespace), name)

    @op.register_fake
    def _(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        return query.new_empty(tuple(query.shape[:-1]) + (value.shape[-1],))

    return op


_op = _register_op()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature and meaning: the
    artifact's kernels where they cover the call (a new output, dense in q's dimension
    order as PyTorch's SDPA makes it), else PyTorch's
    SDPA with the same arguments (counted in stats(); strict mode raises FallbackError).
    scale=None is 1/sqrt(head_dim); is_causal is top-left aligned, as PyTorch's."""
    if _compiling():
        if (query.requires_grad or key.requires_grad or value.requires_grad) and _torch.is_grad_enabled():
            kw = {"enable_gqa": True} if enable_gqa else {}
            return _torch.nn.functional.scaled_dot_product_attention(
                query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)
        if _op is not None:
            return _op(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def attention(q, k, v, causal=False, scale=None):
    """scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)."""
    return scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


# ---- Hugging Face transformers ------------------------------------------------------------

def transformers_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                           **kwargs):
    """An attention function of transformers' AttentionInterface (the arguments of its
    sdpa_attention_forward): query (batch, heads, seq, head_dim), key and value (batch,
    kv heads, seq, head_dim); returns (output (batch, seq, heads, head_dim), None)."""
    # As transformers' SDPA path: causal only for more than one query and no mask.
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and bool(is_causal)
    o = scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                     is_causal=is_causal, scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
    return o.transpose(1, 2).contiguous(), None


def register_transformers(name="evo"):
    """Registers transformers_attention as attn_implementation=`name`, with SDPA's mask
    rules (no mask when the causal mask can be skipped, so the causal kernels run)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(name, transformers_attention)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name

"""A stand-in for the bits of torch that evo_kernel touches (tests only): tensors are
metadata (shape, strides, dtype, device, a made-up data pointer), nothing is computed.
Knobs for tests: `cuda.capability`, `compiler.compiling`, `set_grad_enabled`,
`nn.functional.calls` (what the fallback was asked), `library.ops` (registered ops)."""
from . import nn  # noqa: F401  (torch.nn.functional)


class dtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name

    __repr__ = __str__


float16 = dtype("torch.float16")
bfloat16 = dtype("torch.bfloat16")
float32 = dtype("torch.float32")
uint8 = dtype("torch.uint8")


class device:
    def __init__(self, text):
        text = str(text)
        self.type, _, idx = text.partition(":")
        self.index = int(idx) if idx else (0 if self.type == "cuda" else None)
        self._text = self.type if self.index is None else f"{self.type}:{self.index}"
        self._hash = hash(self._text)

    def __str__(self):
        return self._text

    __repr__ = __str__

    def __eq__(self, other):
        return self._text == str(other)

    def __hash__(self):
        return self._hash


def _contiguous(shape):
    acc, strides = 1, []
    for n in reversed(shape):
        strides.insert(0, acc)
        acc *= n
    return tuple(strides)


class Tensor:
    _next = 0x10000

    def __init__(self, shape, dtype=float16, device_="cuda:0", strides=None, ptr=None, requires_grad=False):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device_ if isinstance(device_, device) else device(device_)
        self.is_cuda = self.device.type == "cuda"
        self.requires_grad = requires_grad
        if ptr is None:
            ptr = Tensor._next
            Tensor._next += 0x1000000
        self._ptr = ptr
        self._strides = tuple(strides) if strides is not None else _contiguous(self.shape)

    def stride(self):
        return self._strides

    def is_contiguous(self):
        acc = 1
        for n, s in zip(reversed(self.shape), reversed(self._strides)):
            if n != 1 and s != acc:
                return False
            acc *= n
        return True

    def contiguous(self):
        return self if self.is_contiguous() else Tensor(self.shape, self.dtype, self.device)

    def clone(self):
        return Tensor(self.shape, self.dtype, self.device)

    def transpose(self, a, b):
        shape, strides = list(self.shape), list(self._strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return Tensor(shape, self.dtype, self.device, strides, self._ptr, self.requires_grad)

    def new_empty(self, shape):
        return Tensor(shape, self.dtype, self.device)

    def data_ptr(self):
        return self._ptr


def empty(shape, dtype=float16, device=None):
    return Tensor((shape,) if isinstance(shape, int) else shape, dtype, device)


def empty_strided(shape, strides, dtype=float16, device=None):
    return Tensor(shape, dtype, device, strides)


def empty_like(t):
    # torch's preserve_format keeps a dense tensor's strides.
    return Tensor(t.shape, t.dtype, t.device, t.stride())


_grad = [True]


def is_grad_enabled():
    return _grad[0]


def set_grad_enabled(on):
    _grad[0] = on


class cuda:
    capability = (9, 0)

    @staticmethod
    def get_device_capability(d=None):
        return cuda.capability

    @staticmethod
    def get_device_name(d=None):
        return "Fake H100"

    @staticmethod
    def current_device():
        return 0

    class _Stream:
        cuda_stream = 0x5500

    @staticmethod
    def current_stream(d=None):
        return cuda._Stream()


class _C:
    @staticmethod
    def _cuda_getCurrentRawStream(index):
        return 0x5500


class compiler:
    compiling = False

    @staticmethod
    def is_compiling():
        return compiler.compiling


class _Namespace:
    pass


class ops:
    pass


class library:
    """torch.library.custom_op as far as evo_kernel uses it: the op calls its function;
    `ops` lists every registered name, `calls` every call through an op."""
    ops = {}
    calls = []

    class _Op:
        def __init__(self, name, fn):
            self.name, self.fn, self.fake = name, fn, None

        def register_fake(self, fn):
            self.fake = fn
            return fn

        def __call__(self, *args):
            library.calls.append((self.name, args))
            return self.fn(*args)

    @staticmethod
    def custom_op(name, mutates_args):
        assert mutates_args == ()

        def wrap(fn):
            if name in library.ops:
                raise RuntimeError(f"operator {name} registered twice")
            op = library._Op(name, fn)
            library.ops[name] = op
            namespace, short = name.split("::")
            if not hasattr(ops, namespace):
                setattr(ops, namespace, _Namespace())
            setattr(getattr(ops, namespace), short, op)
            return op
        return wrap

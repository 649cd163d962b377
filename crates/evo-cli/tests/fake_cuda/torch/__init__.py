"""A stand-in for the bits of torch that evo_kernel.attention touches (tests only)."""


class dtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


float16 = dtype("torch.float16")
bfloat16 = dtype("torch.bfloat16")
float32 = dtype("torch.float32")
uint8 = dtype("torch.uint8")


class device:
    def __init__(self, text):
        self.type, _, idx = text.partition(":")
        self.index = int(idx) if idx else None

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class Tensor:
    _next = 0x10000

    def __init__(self, shape, dtype=float16, device_="cuda:0"):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device(device_)
        self.is_cuda = self.device.type == "cuda"
        self._ptr = Tensor._next
        Tensor._next += 0x1000000
        acc, strides = 1, []
        for n in reversed(self.shape):
            strides.insert(0, acc)
            acc *= n
        self._strides = tuple(strides)

    def stride(self):
        return self._strides

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return self._ptr


def empty(shape, dtype=float16, device=None):
    return Tensor((shape,) if isinstance(shape, int) else shape, dtype, str(device))


class cuda:
    @staticmethod
    def get_device_capability(d=None):
        return (9, 0)

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

"""What evo_kernel.plan() reads of torch tensors, without torch (tests only; see
artifact_plan.py and crates/evo-cli/tests/export.rs)."""


class DType:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class Fake:
    """What plan() reads of a torch.Tensor."""

    def __init__(self, shape, dtype="torch.float16", ptr=4096, strides=None, device="cuda:0"):
        self.shape = tuple(shape)
        self.dtype = DType(dtype)
        self.device = device
        self.is_cuda = device.startswith("cuda")
        self._ptr = ptr
        if strides is None:
            strides, acc = [], 1
            for n in reversed(self.shape):
                strides.insert(0, acc)
                acc *= n
        self._strides = tuple(strides)

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr


def qkv(b, h, sq, skv, d, **kw):
    return Fake((b, h, sq, d), ptr=4096, **kw), Fake((b, h, skv, d), ptr=8192, **kw), Fake((b, h, skv, d), ptr=12288, **kw)

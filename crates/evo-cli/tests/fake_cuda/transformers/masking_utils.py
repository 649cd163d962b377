"""A stand-in for transformers.masking_utils (tests only)."""
from . import GeneralInterface


def sdpa_mask(*args, **kwargs):
    return None


class AttentionMaskInterface(GeneralInterface):
    _global_mapping = {"sdpa": sdpa_mask}

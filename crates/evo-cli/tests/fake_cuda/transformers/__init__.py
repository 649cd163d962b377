"""A stand-in for transformers' attention registry (tests only): what
evo_kernel.register_transformers touches."""


class GeneralInterface:
    _global_mapping = {}

    @classmethod
    def register(cls, key, value):
        cls._global_mapping.update({key: value})


class AttentionInterface(GeneralInterface):
    _global_mapping = {"sdpa": "sdpa_attention_forward"}

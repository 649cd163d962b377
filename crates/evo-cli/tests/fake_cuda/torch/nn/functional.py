"""torch.nn.functional.scaled_dot_product_attention, recording its calls (tests only)."""
calls = []


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    calls.append({"q": query, "k": key, "v": value, "attn_mask": attn_mask, "dropout_p": dropout_p,
                  "is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa})
    return query.new_empty(tuple(query.shape[:-1]) + (value.shape[-1],))

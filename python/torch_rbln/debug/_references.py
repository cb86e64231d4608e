"""CPU references for the ops that exist only for backends (PrivateUse1's "overrideable" entry points,
which CPU does not implement): the public op they stand for, computed on CPU. Each takes the op's CPU
arguments and returns the results to compare, in the op's order (a prefix of them)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _sdpa(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
          scale=None):
    _no_dropout(dropout_p)
    return (F.scaled_dot_product_attention(query, key, value, attn_mask=attn_bias, is_causal=is_causal,
                                           scale=scale, enable_gqa=query.shape[-3] != key.shape[-3]),)


def _sdpa_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
                   max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    _no_dropout(dropout_p)
    inputs = [t.detach().requires_grad_(bool(wanted)) if t is not None else None
              for t, wanted in zip((query, key, value, attn_bias), grad_input_mask)]
    with torch.enable_grad(), _autograd_on_cpu():
        result = _sdpa(*inputs[:3], inputs[3], is_causal=is_causal, scale=scale)[0]
        wanted = [t for t in inputs if t is not None and t.requires_grad]
        grads = iter(torch.autograd.grad(result, wanted, grad_out))
    return tuple(next(grads) if t is not None and t.requires_grad else None for t in inputs)


def _autograd_on_cpu():
    """Inside a dispatch mode's handler autograd is excluded (the handler runs below it); the reference
    for a backward op differentiates on CPU, so CPU's autograd keys are let through for it."""
    C = torch._C
    exclude = C._dispatch_tls_local_exclude_set()
    exclude = exclude.remove(C.DispatchKey.AutogradCPU).remove(C.DispatchKey.ADInplaceOrView)
    return C._ForceDispatchKeyGuard(C._dispatch_tls_local_include_set(), exclude)


def _no_dropout(p: float) -> None:
    if p > 0:
        raise NotImplementedError("attention with dropout is random: not compared")


REFERENCES = {
    "aten::_scaled_dot_product_fused_attention_overrideable": _sdpa,
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": _sdpa_backward,
}

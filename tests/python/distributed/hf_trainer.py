"""Hugging Face's Trainer as users run it, with no device named anywhere: a tiny Llama built from its config
(nothing is downloaded), 4 AdamW steps over 16 sequences, the loss logged at every step.

test_trainer.py imports it to train in one process (4 sequences a step). Run under torchrun or
`accelerate launch --multi_gpu` (hf_trainer.py OUTPUT_DIR) it trains data-parallel, 2 sequences per rank
a step: the same 4 sequences a step as one process, so the same losses. Prints one JSON line per rank."""
from __future__ import annotations

import copy
import sys
import warnings

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

warnings.simplefilter("ignore")

torch.manual_seed(0)
MODEL = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
_IDS = torch.randint(0, 128, (16, 12), generator=torch.Generator().manual_seed(1))
DATA = [{"input_ids": row, "labels": row} for row in _IDS]


class Seen(TrainerCallback):
    """The devices the parameters are on after each step, and the dtypes the first projection computes in."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.devices, self.dtypes = set(), set()
        model.model.layers[0].self_attn.q_proj.register_forward_hook(
            lambda module, inputs, output: self.dtypes.add(str(output.dtype)))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.devices |= {str(p.device) for p in model.parameters()}


def train(per_device_batch: int, output_dir: str, **arguments) -> dict:
    seen = Seen()
    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=per_device_batch, max_steps=4,
                             logging_steps=1, learning_rate=1e-2, seed=0, report_to="none", save_strategy="no",
                             disable_tqdm=True, **arguments)
    trainer = Trainer(model=copy.deepcopy(MODEL), args=args, train_dataset=DATA, callbacks=[seen])
    with torch.rbln.explain() as ex:
        trainer.train()
    dist = torch.distributed
    return {"device": str(args.device), "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
            "params": sorted(seen.devices), "dtypes": sorted(seen.dtypes), "fallbacks": sorted(ex.fallback_ops),
            "device_mm": ex.device_ops.get("aten::mm", 0), "parallel_mode": str(args.parallel_mode),
            "distributed_type": str(trainer.accelerator.distributed_type),
            "backend": dist.get_backend() if dist.is_initialized() else None,
            "wrapped": type(trainer.model_wrapped).__name__,
            "checksum": sum(p.detach().double().sum().item() for p in trainer.model.parameters())}


if __name__ == "__main__":
    from report import report

    result = train(2, sys.argv[1])
    report(rank=torch.distributed.get_rank(), world=torch.distributed.get_world_size(), **result)

"""A quantized language model on rbln: Hugging Face's `from_pretrained` with a torchao quantization config and
`device_map="rbln"`, then greedy generation, checked against the same quantized model on the CPU.

A small Llama with random weights (seeded) is saved to a temporary directory first, so nothing is downloaded;
pass a checkpoint directory to use your own:

    python examples/quantized_llm.py [checkpoint] [--config int8-weight-only|int8-dynamic|float8-weight-only|float8-dynamic]
"""
import argparse
import tempfile
import time

import torch
from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, Float8WeightOnlyConfig,
                                  Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, PerRow)
from transformers import LlamaConfig, LlamaForCausalLM, TorchAoConfig

import torch_rbln  # noqa: F401  (also autoloaded by `import torch`)

CONFIGS = {
    "int8-weight-only": Int8WeightOnlyConfig,
    "int8-dynamic": Int8DynamicActivationInt8WeightConfig,
    "float8-weight-only": Float8WeightOnlyConfig,
    "float8-dynamic": lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),  # bfloat16 weights
}


def tiny_llama(path):
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=1536, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)


def device_bytes(load):
    """The model load() returns, and the device memory it takes."""
    torch.rbln.synchronize()
    start = torch.rbln.memory_allocated()
    model = load()
    torch.rbln.synchronize()
    return model, torch.rbln.memory_allocated() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", nargs="?")
    p.add_argument("--config", choices=CONFIGS, default="int8-weight-only")
    p.add_argument("--tokens", type=int, default=16)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.checkpoint or tmp
        if not args.checkpoint:
            tiny_llama(path)
        dtype = torch.bfloat16 if args.config == "float8-dynamic" else torch.float32
        quant = TorchAoConfig(CONFIGS[args.config]())
        load = lambda device, q=quant: LlamaForCausalLM.from_pretrained(path, quantization_config=q, dtype=dtype,
                                                                      device_map=device)
        _, float_bytes = device_bytes(lambda: load("rbln", None))
        model, quant_bytes = device_bytes(lambda: load("rbln"))
        reference = load("cpu")
    prompt = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    expected = reference.generate(prompt, max_new_tokens=args.tokens, do_sample=False)
    model.generate(prompt.rbln(), max_new_tokens=2, do_sample=False)  # warm-up
    start = time.perf_counter()
    with torch.rbln.explain() as ex:
        tokens = model.generate(prompt.rbln(), max_new_tokens=args.tokens, do_sample=False).cpu()
    elapsed = time.perf_counter() - start
    print(f"{args.config}: device memory {quant_bytes / 2**20:.2f} MiB, the float model's {float_bytes / 2**20:.2f} MiB "
          f"({quant_bytes / float_bytes:.2f}x)")
    print(f"generated {args.tokens} tokens on rbln in {elapsed * 1e3:.0f} ms; equal to the CPU's quantized model's: "
          f"{torch.equal(tokens, expected)}")
    print(f"op calls on the device: {sum(ex.device_ops.values())}, CPU fallbacks: {sum(ex.fallback_ops.values())}")
    if not torch.equal(tokens, expected) or ex.fallback_ops:
        raise SystemExit("quantized_llm: rbln differs from CPU or fell back")


if __name__ == "__main__":
    main()

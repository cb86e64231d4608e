"""torchao's quantization configs and Hugging Face's TorchAoConfig on rbln (docs/quantization.md): a model quantized
on the device runs with no CPU fallback, gives what the same config gives on CPU, and stays close to the float
model; the quantized weights stay small in device memory."""
import copy

import pytest
import torch
from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, Float8WeightOnlyConfig,
                                  Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, PerRow, PerTensor,
                                  quantize_)
from torchao.quantization.utils import compute_error

CONFIGS = {  # name -> (config, the model's dtype, torchao's SQNR bound against the float model in dB, its matmul)
    "int8-weight-only": (Int8WeightOnlyConfig, torch.float32, 35, "aten::mm"),
    "int8-dynamic": (Int8DynamicActivationInt8WeightConfig, torch.float32, 30, "aten::_int_mm"),
    "float8-weight-only": (Float8WeightOnlyConfig, torch.bfloat16, 25, "aten::mm"),
    "float8-dynamic-tensorwise": (lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()),
                                  torch.bfloat16, 20, "aten::_scaled_mm"),
    "float8-dynamic-rowwise": (lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
                               torch.bfloat16, 20, "aten::_scaled_mm"),
}


def mlp(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.SiLU(), torch.nn.Linear(512, 128)).to(dtype).eval()


@pytest.mark.parametrize("name", CONFIGS)
def test_torchao_config_quantizes_and_runs_on_rbln_as_on_cpu(name):
    make, dtype, sqnr, matmul = CONFIGS[name]
    model = mlp(dtype)
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1)).to(dtype)
    on_cpu = copy.deepcopy(model)
    quantize_(on_cpu, make())
    on_rbln = copy.deepcopy(model).to("rbln")
    quantize_(on_rbln, make())  # quantized on the device
    assert type(on_rbln[0].weight) is type(on_cpu[0].weight) and on_rbln[0].weight.device.type == "rbln"
    with torch.no_grad(), torch.rbln.explain() as ex:
        y = on_rbln(x.rbln())
    assert not ex.fallback_ops, ex.fallback_ops
    assert ex.device_ops[matmul] == 2, ex.device_ops  # one per Linear
    with torch.no_grad():
        expected, reference = on_cpu(x), model(x)
    assert y.dtype == expected.dtype
    torch.testing.assert_close(y.cpu(), expected, atol=2e-2, rtol=2e-2)  # CPU's quantized numerics
    assert compute_error(reference.float(), y.cpu().float()) > sqnr  # torchao's accuracy against the float model


def test_int4_weight_only_in_cudas_layout_quantizes_and_runs_on_rbln():
    """Int4WeightOnlyConfig's tile_packed_to_4d tensors, the layout torchao packs for CUDA (CPU has neither of its
    ops): packed by rbln's _convert_weight_to_int4pack, run by its _weight_int4pack_mm, within torchao's accuracy of
    the float model, eight weights an int32 word in device memory."""
    from torchao.quantization import Int4WeightOnlyConfig

    model = mlp(torch.bfloat16)
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    on_rbln = copy.deepcopy(model).to("rbln")
    with torch.rbln.explain() as packing:
        quantize_(on_rbln, Int4WeightOnlyConfig(group_size=64, int4_packing_format="tile_packed_to_4d"))
    assert not packing.fallback_ops, packing.fallback_ops
    assert packing.device_ops["aten::_convert_weight_to_int4pack"] == 2, packing.device_ops
    weight = on_rbln[2].weight  # [128, 512]: packed from its padding to 1024 columns, torchao's rule
    assert type(weight).__name__ == "Int4TilePackedTo4dTensor" and weight.qdata.device.type == "rbln"
    assert weight.qdata.dtype == torch.int32 and weight.qdata.numel() * 8 == 128 * 1024
    with torch.no_grad(), torch.rbln.explain() as ex:
        y = on_rbln(x.rbln())
    assert not ex.fallback_ops, ex.fallback_ops
    assert ex.device_ops["aten::_weight_int4pack_mm"] == 2, ex.device_ops
    with torch.no_grad():
        reference = model(x)
    assert y.dtype == torch.bfloat16 and compute_error(reference.float(), y.cpu().float()) > 20


def test_the_cuda_capability_is_answered_only_while_packing_for_rbln():
    from torchao.quantization import Int4WeightOnlyConfig

    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        torch.cuda.get_device_capability()
    with pytest.raises(AssertionError, match="not compiled with CUDA"):  # a CPU model: torchao's own question
        quantize_(mlp(torch.bfloat16), Int4WeightOnlyConfig(group_size=64, int4_packing_format="tile_packed_to_4d"))
    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        torch.cuda.get_device_capability()


def test_int8_weights_take_a_quarter_of_float32_device_memory():
    torch.rbln.synchronize()
    start = torch.rbln.memory_allocated()
    model = mlp(torch.float32).to("rbln")
    weights = sum(m.weight.numel() for m in model if isinstance(m, torch.nn.Linear))
    full = torch.rbln.memory_allocated() - start
    quantize_(model, Int8WeightOnlyConfig())
    torch.rbln.synchronize()
    int8 = torch.rbln.memory_allocated() - start
    assert full >= 4 * weights and int8 <= full - 3 * weights + 4 * 1024  # the int8 bytes, a scale per row, biases


def test_int8_embedding_weights_run_on_rbln_and_equal_cpus():
    # torchao quantizes an nn.Embedding's table when filter_fn selects it (Int8Tensor's embedding dequantizes).
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.Linear(32, 16))
    dev = copy.deepcopy(cpu).to("rbln")
    both = lambda module, fqn: isinstance(module, (torch.nn.Linear, torch.nn.Embedding))  # noqa: E731
    quantize_(cpu, Int8WeightOnlyConfig(), filter_fn=both)
    quantize_(dev, Int8WeightOnlyConfig(), filter_fn=both)
    assert dev[0].weight.qdata.dtype == torch.int8 and dev[0].weight.qdata.device.type == "rbln"
    tokens = torch.randint(0, 64, (2, 5))
    with torch.rbln.explain() as ex, torch.no_grad():
        out = dev(tokens.rbln()).cpu()
    assert not ex.fallback_ops, ex.fallback_ops
    with torch.no_grad():
        torch.testing.assert_close(out, cpu(tokens))


def test_hugging_face_torchao_config_loads_on_rbln_and_generates_cpus_tokens(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM, TorchAoConfig

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    prompt = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(2))
    for quant in (Int8WeightOnlyConfig(), Int8DynamicActivationInt8WeightConfig()):
        loaded = {device: LlamaForCausalLM.from_pretrained(tmp_path, quantization_config=TorchAoConfig(quant),
                                                           device_map=device) for device in ("cpu", "rbln")}
        layer = loaded["rbln"].model.layers[0].mlp.up_proj.weight
        assert layer.device.type == "rbln" and layer.qdata.dtype == torch.int8
        expected = loaded["cpu"].generate(prompt, max_new_tokens=8, do_sample=False)
        with torch.rbln.explain() as ex:
            tokens = loaded["rbln"].generate(prompt.rbln(), max_new_tokens=8, do_sample=False)
        assert torch.equal(tokens.cpu(), expected), type(quant).__name__
        assert not ex.fallback_ops, ex.fallback_ops


def test_quantized_llm_example_runs_as_a_user_runs_it():
    """examples/quantized_llm.py in its own interpreter: exit status 0 (it checks CPU's tokens and no fallback
    itself), and the int8 model takes at most 0.3 of the float model's device memory."""
    import re
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quantized_llm.py"), "--tokens", "4"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "equal to the CPU's quantized model's: True" in proc.stdout
    ratio = float(re.search(r"\((\d+\.\d+)x\)", proc.stdout).group(1))
    assert ratio <= 0.3, proc.stdout


def test_demo_int8_generation_matches_cpu(capsys):
    """make demo's last part (examples/demo.py int8_weight_only): it raises SystemExit on a mismatch or fallback."""
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import demo
    finally:
        sys.path.remove(str(ROOT / "examples"))
    torch.manual_seed(0)
    demo.int8_weight_only(demo.TinyLlama().eval(), torch.randint(0, 512, (2, 8)), 4)
    out = capsys.readouterr().out
    assert "equal the CPU's int8 model's: True" in out
    assert float(out.split("MiB (")[1].split("x)")[0]) <= 0.35


def test_hugging_face_torchao_int4_config_in_cudas_layout_loads_and_generates_on_rbln(tmp_path):
    """TorchAoConfig(Int4WeightOnlyConfig(tile_packed_to_4d)) with device_map="rbln": packed while loading, generates
    with no fallback, its logits within torchao's int4 accuracy of the bfloat16 model's (CPU cannot run it)."""
    from transformers import LlamaConfig, LlamaForCausalLM, TorchAoConfig
    from torchao.quantization import Int4WeightOnlyConfig

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    prompt = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(2))
    quant = TorchAoConfig(Int4WeightOnlyConfig(group_size=32, int4_packing_format="tile_packed_to_4d"))
    model = LlamaForCausalLM.from_pretrained(tmp_path, quantization_config=quant, device_map="rbln",
                                             dtype=torch.bfloat16)
    weight = model.model.layers[0].mlp.up_proj.weight
    assert type(weight).__name__ == "Int4TilePackedTo4dTensor" and weight.qdata.device.type == "rbln"
    with torch.no_grad(), torch.rbln.explain() as ex:
        tokens = model.generate(prompt.rbln(), max_new_tokens=8, do_sample=False)
        logits = model(prompt.rbln()).logits
    assert not ex.fallback_ops, ex.fallback_ops
    assert ex.device_ops["aten::_weight_int4pack_mm"] > 0 and tokens.shape == (1, 16)
    with torch.no_grad():
        reference = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)(prompt).logits
    assert compute_error(reference.float(), logits.cpu().float()) > 15

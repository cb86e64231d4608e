"""Sparse COO tensors on rbln (runtime/device/RBLNSparse.cpp): built, queried and copied on the device; the ops that
compute on the sparse layout run through the counted CPU fallback. Each result is checked against CPU's."""
import warnings

import pytest
import torch

INDICES = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]])  # (0, 2) twice: uncoalesced
VALUES = torch.tensor([3.0, 4.0, 5.0, 6.0])


@pytest.fixture(autouse=True)
def _quiet_fallback_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def sparse(device="cpu", values=VALUES):
    return torch.sparse_coo_tensor(INDICES.to(device), values.to(device), (2, 3))


def test_construction_and_structure_stay_on_the_device():
    with torch.rbln.explain() as ex:
        s = sparse("rbln")
        facts = (s.layout, s.device, s.sparse_dim(), s.dense_dim(), s._nnz(), s.is_coalesced(), s.shape)
        indices, values = s._indices(), s._values()
    assert facts == (torch.sparse_coo, torch.device("rbln:0"), 2, 0, 4, False, torch.Size([2, 3]))
    assert indices.device.type == values.device.type == "rbln"
    assert torch.equal(indices.cpu(), INDICES) and torch.equal(values.cpu(), VALUES)
    assert not ex.fallback_ops


def test_moves_between_cpu_and_rbln_keep_indices_and_values():
    s = sparse().rbln()
    assert s.device.type == "rbln" and s._indices().device.type == "rbln"
    back = s.cpu()
    assert back.layout == torch.sparse_coo and torch.equal(back.to_dense(), sparse().to_dense())
    assert sparse("rbln").to("rbln:1")._values().device == torch.device("rbln:1")


@pytest.mark.parametrize("name,fn", [
    ("coalesce", lambda s, d: s.coalesce()),
    ("to_dense", lambda s, d: s.to_dense()),
    ("to_sparse", lambda s, d: (d.relu() if d.dim() == 2 else d).to_sparse()),
    ("sparse.mm", lambda s, d: torch.sparse.mm(s, d)),
    ("matmul", lambda s, d: s @ d),
    ("add", lambda s, d: s + s),
    ("mul", lambda s, d: s * 2.5),
    ("transpose", lambda s, d: s.t()),
    ("sparse.sum", lambda s, d: torch.sparse.sum(s, dim=1)),
])
def test_sparse_ops_match_cpu_and_their_fallbacks_are_counted(name, fn):
    dense = torch.randn(3, 4)
    expected = fn(sparse(), dense)
    with torch.rbln.explain() as ex:
        actual = fn(sparse("rbln"), dense.rbln())
    assert actual.device.type == "rbln" and actual.layout == expected.layout
    to_dense = (lambda t: t.to_dense()) if expected.is_sparse else (lambda t: t)
    torch.testing.assert_close(to_dense(actual.cpu()), to_dense(expected))
    # to_sparse's input is dense: the dense fallback's reason
    reasons = {reason for per_op in ex.fallback_reasons.values() for reason in per_op}
    assert reasons <= {"sparse layout: no device kernel", "not in ops.yaml"}


def test_coalesce_sums_duplicates_as_cpu_does():
    c = sparse("rbln").coalesce()
    assert c.is_coalesced() and c.device.type == "rbln"
    assert torch.equal(c.indices().cpu(), sparse().coalesce().indices())
    assert torch.equal(c.values().cpu(), torch.tensor([9.0, 4.0, 5.0]))


def test_gradients_through_sparse_mm_match_cpu():
    weight = torch.randn(3, 4)
    values = VALUES.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    torch.sparse.mm(sparse(values=values), w).square().sum().backward()
    values_d = VALUES.rbln().requires_grad_()
    w_d = weight.rbln().requires_grad_()
    torch.sparse.mm(sparse("rbln", values_d), w_d).square().sum().backward()
    torch.testing.assert_close(w_d.grad.cpu(), w.grad)
    torch.testing.assert_close(values_d.grad.cpu(), values.grad)


def test_mixed_devices_get_cudas_errors():
    with pytest.raises(RuntimeError, match="backend of indices .* must match backend of values"):
        torch.sparse_coo_tensor(INDICES.rbln(), VALUES, (2, 3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.sparse.mm(sparse("rbln"), torch.ones(3, 2))
    torch.testing.assert_close(torch.sparse.mm(sparse("rbln"), torch.ones(3, 2, device="rbln")).cpu(),
                               torch.sparse.mm(sparse(), torch.ones(3, 2)))


def test_sparse_embedding_gradients_train_with_sparse_adam_as_on_cpu():
    torch.manual_seed(0)
    cpu = torch.nn.Embedding(10, 3, sparse=True)
    dev = torch.nn.Embedding(10, 3, sparse=True)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.rbln()
    idx = torch.tensor([[1, 2, 4], [4, 3, 9]])
    optimizers = [torch.optim.SparseAdam(cpu.parameters()), torch.optim.SparseAdam(dev.parameters())]
    for _ in range(3):
        for model, opt, i in zip((cpu, dev), optimizers, (idx, idx.rbln())):
            opt.zero_grad()
            model(i).square().sum().backward()
            opt.step()
    assert dev.weight.grad.layout == torch.sparse_coo and dev.weight.grad.device.type == "rbln"
    torch.testing.assert_close(dev.weight.grad.cpu().to_dense(), cpu.weight.grad.to_dense())
    torch.testing.assert_close(dev.weight.detach().cpu(), cpu.weight.detach())


def test_a_sparse_training_script_exits_cleanly_with_cpus_weights(run_python):
    """As a user runs it: a script that trains a sparse embedding bag of words with SparseAdam on rbln:1, then
    exits (status 0, checked by run_python), against the same script on CPU."""
    out = run_python("""
        def train(device):
            torch.manual_seed(0)
            emb = torch.nn.Embedding(50, 8, sparse=True).to(device)
            head = torch.nn.Linear(8, 3).to(device)
            opts = [torch.optim.SparseAdam(emb.parameters(), lr=0.05), torch.optim.Adam(head.parameters(), lr=0.05)]
            words = torch.randint(0, 50, (16, 6), generator=torch.Generator().manual_seed(1)).to(device)
            labels = torch.randint(0, 3, (16,), generator=torch.Generator().manual_seed(2)).to(device)
            losses = []
            for _ in range(5):
                for o in opts:
                    o.zero_grad()
                loss = torch.nn.functional.cross_entropy(head(emb(words).mean(1)), labels)
                loss.backward()
                for o in opts:
                    o.step()
                losses.append(loss.item())
            return losses, emb.weight.detach().cpu(), emb.weight.grad
        cpu_losses, cpu_weight, _ = train("cpu")
        with torch.rbln.explain() as ex:
            losses, weight, grad = train("rbln:1")
        print(json.dumps({"losses_close": torch.allclose(torch.tensor(losses), torch.tensor(cpu_losses), atol=1e-5),
                          "weights_close": torch.allclose(weight, cpu_weight, atol=1e-5),
                          "grad": [str(grad.layout), str(grad.device)],
                          "reasons": sorted({r for per_op in ex.fallback_reasons.values() for r in per_op})}))
        """)
    assert out["losses_close"] and out["weights_close"]
    assert out["grad"] == ["torch.sparse_coo", "rbln:1"]
    assert out["reasons"] == ["sparse layout: no device kernel"]

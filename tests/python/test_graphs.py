"""Graph capture and replay on rbln: torch.accelerator.Graph, torch.rbln.graph and its torch.cuda names."""
import copy
import warnings

import pytest
import torch

import torch_rbln

NOT_PERMITTED = "operation not permitted when stream is capturing"


@pytest.fixture
def cpu_x(cpu_rand):
    return cpu_rand(16, 16) / 10


def _step(x):
    return ((x @ x).relu() * 2 + x).sum(0)


def test_torch_cuda_graph_names_are_in_torch_rbln():
    for name in ("RBLNGraph", "graph", "make_graphed_callables", "graph_pool_handle", "is_current_stream_capturing"):
        assert getattr(torch.rbln, name) is getattr(torch.rbln.graphs, name)
    import torch.rbln.graphs as module  # importable as torch.cuda.graphs is
    assert module is torch.rbln.graphs


def test_accelerator_graph_replays_equal_eager_and_cpu_with_refilled_input(cpu_x, cpu_rand):
    static_x, replays = cpu_x.to("rbln"), torch.zeros((), device="rbln")
    g = torch.accelerator.Graph()
    with torch.rbln.stream(torch.rbln.Stream()), torch.rbln.explain() as ex:
        with g:
            assert torch.rbln.is_current_stream_capturing()
            static_y = _step(static_x)
            replays.add_(1)
    assert not torch.rbln.is_current_stream_capturing()
    assert ex.device_ops and not ex.fallback_ops  # captured on the device
    assert replays.item() == 0  # capture itself computes nothing...
    g.replay()
    assert replays.item() == 1
    torch.testing.assert_close(static_y.cpu(), _step(cpu_x))
    for _ in range(3):  # ...replays do, on whatever the static input holds
        new = cpu_rand(16, 16) / 10
        static_x.copy_(new)
        g.replay()
        torch.testing.assert_close(static_y.cpu(), _step(new))


def test_replays_equal_cpu_while_the_first_ones_try_both_worker_team_sizes(cpu_rand):
    # The first six replays alternate the worker's team size (the driver keeps the faster one): big enough for
    # parallel regions (matmul, softmax over 256 columns), every replay must still give CPU's values.
    static_x = torch.empty(256, 256, device="rbln")
    g = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g):
        static_y = (static_x @ static_x.T).softmax(-1) @ static_x
    for _ in range(10):
        new = cpu_rand(256, 256)
        static_x.copy_(new)
        g.replay()
        torch.testing.assert_close(static_y.cpu(), (new @ new.T).softmax(-1) @ new)


def test_rbln_graph_context_manager_with_default_capture_stream(cpu_x):
    static_x = cpu_x.to("rbln")
    g = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g):
        assert torch.rbln.current_stream() != torch.rbln.default_stream()
        static_y = torch.tanh(static_x) @ static_x
    static_y.zero_()
    g.replay()
    torch.testing.assert_close(static_y.cpu(), torch.tanh(cpu_x) @ cpu_x)
    assert isinstance(g.pool(), tuple) and len(g.pool()) == 2


def test_capture_on_the_default_stream_is_refused(cpu_x, assert_device_works):
    g = torch.rbln.RBLNGraph()
    with pytest.raises(RuntimeError, match="must be captured on a non-default stream"):
        g.capture_begin()
    assert not torch.rbln.is_current_stream_capturing()
    assert_device_works()


def test_multi_stream_capture_joins_and_must_rejoin(cpu_x, assert_device_works):
    static_x = cpu_x.to("rbln")
    side = torch.rbln.Stream()
    g = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g):
        main = torch.rbln.current_stream()
        a = static_x * 3
        side.wait_stream(main)
        with torch.rbln.stream(side):
            b = static_x.exp()
        main.wait_stream(side)
        out = a + b
    g.replay()
    torch.testing.assert_close(out.cpu(), cpu_x * 3 + cpu_x.exp())

    unjoined = torch.rbln.RBLNGraph()
    with pytest.raises(RuntimeError, match="capturing stream has unjoined work"):
        with torch.rbln.graph(unjoined):
            side.wait_stream(torch.rbln.current_stream())
            with torch.rbln.stream(side):
                static_x.exp()
    assert_device_works()


@pytest.mark.parametrize("sync", [
    lambda x: x.sum().item(),
    lambda x: x.cpu(),
    lambda x: torch.nonzero(x),
    lambda x: torch.rbln.synchronize(),
    lambda x: torch.rbln.current_stream().synchronize(),
], ids=["item", "cpu", "nonzero", "synchronize", "stream_synchronize"])
def test_host_sync_inside_capture_raises_and_the_device_stays_usable(sync, cpu_x, assert_device_works):
    static_x = cpu_x.to("rbln")
    g = torch.rbln.RBLNGraph()
    with pytest.raises(RuntimeError, match=NOT_PERMITTED):
        with torch.rbln.graph(g):
            y = static_x + 1
            sync(y)
    assert not torch.rbln.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    assert_device_works()
    g2 = torch.rbln.RBLNGraph()  # capture works again
    with torch.rbln.graph(g2):
        y = static_x + 1
    g2.replay()
    torch.testing.assert_close(y.cpu(), cpu_x + 1)


def test_cpu_fallback_inside_capture_raises_naming_the_op(cpu_x, assert_device_works):
    static_x = cpu_x.to("rbln")
    g = torch.rbln.RBLNGraph()
    # (the fallback's warning is given once per process, so whether this test sees it depends on the tests before)
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match=r"aten::hash_tensor\.out .*graph capture.*"
                                                                       + NOT_PERMITTED):
        warnings.simplefilter("ignore")
        with torch.rbln.graph(g):
            torch.hash_tensor(static_x * 2, dim=1)
    assert_device_works()


def test_graph_memory_comes_from_a_private_pool_and_replays_allocate_nothing(cpu_x):
    static_x = cpu_x.to("rbln")
    g = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g):
        t = static_x * 2
        freed = t.data_ptr()
        del t  # its block goes back to the graph's pool: the next temporary of that size reuses it
        u = static_x * 3
        assert u.data_ptr() == freed
        out = (u + 1).sum()
    pool_segments = [s for s in torch.rbln.memory_snapshot() if tuple(s["segment_pool_id"]) == tuple(g.pool())]
    assert pool_segments and all(s["device"] == 0 for s in pool_segments)
    eager = torch.empty_like(static_x)  # eager allocations never take the graph's memory
    assert all(not (s["address"] <= eager.data_ptr() < s["address"] + s["total_size"]) for s in pool_segments)
    g.replay()
    torch.rbln.synchronize()
    allocated, reserved = torch.rbln.memory_allocated(), torch.rbln.memory_reserved()
    for _ in range(1000):
        g.replay()
    torch.rbln.synchronize()
    assert (torch.rbln.memory_allocated(), torch.rbln.memory_reserved()) == (allocated, reserved)
    torch.testing.assert_close(out.cpu(), (cpu_x * 3 + 1).sum())

    # A second graph shares the pool through pool=; reset graphs give their memory back.
    g2 = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g2, pool=g.pool()):
        out2 = static_x - 1
    assert g2.pool() == g.pool()
    g2.replay()
    torch.testing.assert_close(out2.cpu(), cpu_x - 1)
    pool = tuple(g.pool())
    del out, out2, u
    g.reset()
    g2.reset()
    torch.rbln.synchronize()
    assert not [s for s in torch.rbln.memory_snapshot() if tuple(s["segment_pool_id"]) == pool]


def test_graph_pool_handle_is_shared_by_graphs(cpu_x):
    pool = torch.rbln.graph_pool_handle()
    static_x = cpu_x.to("rbln")
    graphs, outs = [torch.rbln.RBLNGraph() for _ in range(2)], []
    for i, g in enumerate(graphs):
        with torch.rbln.graph(g, pool=pool):
            outs.append(static_x * (i + 2))
        assert g.pool() == pool
    for g in graphs:
        g.replay()
    torch.testing.assert_close(outs[0].cpu(), cpu_x * 2)
    torch.testing.assert_close(outs[1].cpu(), cpu_x * 3)


def test_random_ops_draw_new_numbers_per_replay_reproducibly_from_the_seed():
    torch.rbln.manual_seed(7)
    eager = [torch.rand(1000, device="rbln").cpu() for _ in range(2)]
    g = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g):
        r = torch.rand(1000, device="rbln")
        dropped = torch.nn.functional.dropout(torch.ones(4000, device="rbln"), p=0.5)
    torch.rbln.manual_seed(7)
    replays = []
    for _ in range(2):
        g.replay()
        replays.append((r.cpu(), dropped.cpu()))
    # Each replay draws where eager draws would (the graph's whole draw per replay) and new numbers each time.
    torch.testing.assert_close(replays[0][0], eager[0])
    assert not torch.equal(replays[0][0], replays[1][0])
    assert not torch.equal(replays[0][1], replays[1][1])
    for _, d in replays:  # dropout: zeros or 1 / (1 - p), about half of each
        assert set(d.unique().tolist()) <= {0.0, 2.0} and 0.45 < (d == 0).float().mean() < 0.55
    torch.rbln.manual_seed(7)
    g.replay()
    torch.testing.assert_close(r.cpu(), replays[0][0])


def test_a_registered_generator_draws_new_numbers_per_replay_from_its_state():
    """register_generator_state, as torch.cuda's: the capture records where the generator's draws start, each
    replay draws where the generator stands (as eager draws from it would) and advances it."""
    gen = torch.Generator(device="rbln").manual_seed(11)
    eager = [torch.rand(1000, device="rbln", generator=gen).cpu() for _ in range(2)]
    g = torch.rbln.RBLNGraph()
    g.register_generator_state(gen)
    with torch.rbln.graph(g):
        r = torch.rand(1000, device="rbln", generator=gen)
        default = torch.rand(10, device="rbln")  # the device's default generator, registered by every capture
    gen.manual_seed(11)
    replays = []
    for _ in range(2):
        g.replay()
        replays.append(r.cpu())
    torch.testing.assert_close(replays, eager)
    assert gen.get_offset() == 2 * 1000  # each replay advanced it by the graph's draws
    with pytest.raises(RuntimeError, match="rbln torch.Generator"):
        g.register_generator_state(torch.Generator())


def test_graphsafe_states_swap_what_a_generator_draws_from_and_graphs_record_the_state():
    """torch.Generator.graphsafe_get_state/graphsafe_set_state/clone_state, as on CUDA: a state is shared by the
    generators holding it, a clone draws the same numbers independently, and a capture that swaps the default
    generator to a registered state draws from that state at each replay, leaving the default's state alone."""
    gen = torch.rbln.default_generators[0]
    gen.manual_seed(5)
    first, second = torch.rand(64, device="rbln").cpu(), torch.rand(64, device="rbln").cpu()

    gen.manual_seed(5)
    torch.rand(64, device="rbln")
    default = gen.graphsafe_get_state()
    assert default.device == torch.device("rbln", 0) and default.get_offset() == gen.get_offset() == 64
    side = default.clone_state()  # its own state, where the default stands
    gen.graphsafe_set_state(side)
    torch.testing.assert_close(torch.rand(64, device="rbln").cpu(), second)  # drawn from the clone
    assert side.get_offset() == 128 and default.get_offset() == 64
    gen.graphsafe_set_state(default)
    torch.testing.assert_close(torch.rand(64, device="rbln").cpu(), second)  # the default went on where it was
    assert not torch.equal(first, second)

    side.manual_seed(9)
    reference = side.clone_state()
    eager = [torch.rand(100, device="rbln", generator=reference).cpu() for _ in range(2)]
    g = torch.rbln.RBLNGraph()
    g.register_generator_state(side)
    with torch.rbln.graph(g):
        gen.graphsafe_set_state(side)
        r = torch.rand(100, device="rbln")
        gen.graphsafe_set_state(default)
    before = gen.get_offset()
    replays = []
    for _ in range(2):
        g.replay()
        replays.append(r.cpu())
    torch.testing.assert_close(replays, eager)  # each replay drew where the registered state stood
    assert side.get_offset() == 200 and gen.get_offset() == before
    with pytest.raises(RuntimeError, match="rbln generator"):
        gen.graphsafe_set_state(torch.Generator())


def test_check_input_liveness_raises_at_replay_once_an_input_is_freed():
    """torch.cuda's check_input_liveness: an input the capture read from outside the graph's pool that is freed
    before a replay makes the replay raise (it would read freed memory); tensors of the graph's own pool may go."""
    g = torch.rbln.RBLNGraph()
    x = torch.arange(8.0, device="rbln")
    with torch.rbln.graph(g, check_input_liveness=True):
        inner = x * 2  # allocated from the graph's pool
        y = inner + 1
    del inner
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.arange(8.0) * 2 + 1)
    del x
    with pytest.raises(RuntimeError, match="RBLN graph replay detected 1 dead tensor"):
        g.replay()
    assert (torch.ones(2, device="rbln") + 1).cpu().tolist() == [2.0, 2.0]  # the device stays usable
    plain = torch.rbln.RBLNGraph()  # without the check, nothing is tracked
    with torch.rbln.graph(plain):
        torch.ones(2, device="rbln").add_(1)
    assert plain._tracker is None


def test_an_unregistered_generator_inside_capture_raises_and_the_device_stays_usable():
    gen = torch.Generator(device="rbln").manual_seed(3)
    g = torch.rbln.RBLNGraph()
    with pytest.raises(RuntimeError, match="without a registered capture state"):
        with torch.rbln.graph(g):
            torch.rand(8, device="rbln", generator=gen)
    torch.rbln.synchronize()
    assert torch.rand(8, device="rbln", generator=gen).cpu().shape == (8,)


def test_debug_dump_lists_captured_kernels_and_copies_with_streams(cpu_x, tmp_path):
    static_x = cpu_x.to("rbln")
    g = torch.rbln.RBLNGraph()
    g.enable_debug_mode()
    with torch.rbln.graph(g):
        y = static_x.clone()
        y.copy_(static_x * 2)
        z = y @ y
    g.debug_dump(str(tmp_path / "graph.txt"))
    text = (tmp_path / "graph.txt").read_text()
    stream = torch.rbln.graph.default_capture_stream.stream_id
    assert "aten::mm" in text and f"stream {stream}" in text, text
    g.replay()
    torch.testing.assert_close(z.cpu(), (cpu_x * 2) @ (cpu_x * 2))


def test_make_graphed_callables_mlp_training_equals_eager(cpu_rand):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    eager_model = copy.deepcopy(cpu_model).to("rbln")
    graphed_model = copy.deepcopy(eager_model)
    sample = torch.randn(8, 16, device="rbln", requires_grad=False)
    graphed_model = torch.rbln.make_graphed_callables(graphed_model, (sample,))
    inputs = [cpu_rand(8, 16) / 10 for _ in range(3)]
    targets = [cpu_rand(8, 4) / 10 for _ in range(3)]
    for model in (eager_model, graphed_model, cpu_model):
        device = next(model.parameters()).device
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, t in zip(inputs, targets):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x.to(device)), t.to(device))
            loss.backward()
            opt.step()
    for a, b, c in zip(eager_model.parameters(), graphed_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(b.cpu(), a.cpu())
        torch.testing.assert_close(b.cpu(), c)


def test_whole_training_step_with_capturable_adamw_replays_like_eager(cpu_rand):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    models = [copy.deepcopy(ref).to("rbln") for _ in range(2)]
    xs, ts = [cpu_rand(32, 16) / 10 for _ in range(4)], [cpu_rand(32, 1) / 10 for _ in range(4)]
    eager, graphed = models
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=0.01)
    for x, t in zip(xs, ts):
        eager_opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(eager(x.to("rbln")), t.to("rbln")).backward()
        eager_opt.step()

    opt = torch.optim.AdamW(graphed.parameters(), lr=0.01, capturable=True)
    static_x, static_t = torch.zeros(32, 16, device="rbln"), torch.zeros(32, 1, device="rbln")

    def step():
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.mse_loss(graphed(static_x), static_t).backward()
        opt.step()

    # Warm up on a side stream (optimizer state, autograd's buffers), then capture, as torch.cuda's recipe.
    state = {k: v.clone() for k, v in graphed.state_dict().items()}
    side = torch.rbln.Stream()
    side.wait_stream(torch.rbln.current_stream())
    with torch.rbln.stream(side):
        step()
    torch.rbln.current_stream().wait_stream(side)
    g = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g):
        step()
    # Start over from the same weights and optimizer state as eager's first step.
    graphed.load_state_dict(state)
    for s in opt.state.values():
        for v in s.values():
            v.zero_()
    for x, t in zip(xs, ts):
        static_x.copy_(x)
        static_t.copy_(t)
        g.replay()
    for a, b in zip(eager.parameters(), graphed.parameters()):
        torch.testing.assert_close(b.cpu(), a.cpu(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["rbln", "inductor"])
def test_reduce_overhead_compile_replays_graphs_and_recaptures_on_new_shapes(backend, cpu_rand):
    # Dynamo's state from earlier tests in this process (nn.Sequential.forward's cache entries and recorded
    # shapes) decides when it recompiles, and each compile starts a new set of graphs: start clean.
    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
    dev = copy.deepcopy(cpu).to("rbln")
    compiled = torch.compile(dev, backend=backend, mode="reduce-overhead")
    before = torch.rbln.compile_stats()
    with torch.no_grad():
        for shape in ((4, 16), (4, 16), (4, 16), (6, 16), (6, 16)):
            x = cpu_rand(*shape) / 10
            torch.testing.assert_close(compiled(x.to("rbln")).cpu(), cpu(x), rtol=1e-4, atol=1e-5)
    stats = torch.rbln.compile_stats()
    assert stats.graph_captures - before.graph_captures == 2  # one per input shape
    assert stats.graph_replays - before.graph_replays == 3  # the other calls
    # Training: the forward's saved tensors must outlive the next call, so its graphs run without replay.
    cpu.train()
    dev = copy.deepcopy(cpu).to("rbln")
    x = cpu_rand(4, 16)
    torch.compile(dev, backend=backend, mode="reduce-overhead")(x.to("rbln")).square().sum().backward()
    cpu(x).square().sum().backward()
    assert torch.rbln.compile_stats().graph_captures == stats.graph_captures
    for a, b in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)


def test_hf_static_cache_generate_with_reduce_overhead_forward_gives_cpus_tokens():
    from side_by_side import twin
    from test_models import tiny_llama

    torch.manual_seed(0)
    cpu, dev = twin(tiny_llama)
    cpu.eval(), dev.eval()
    prompt = torch.randint(3, 128, (1, 8))
    kwargs = dict(do_sample=False, max_new_tokens=8, cache_implementation="static")
    expected = cpu.generate(prompt, **kwargs)
    dev.forward = torch.compile(dev.forward, backend="rbln", mode="reduce-overhead")
    before = torch.rbln.compile_stats()
    tokens = dev.generate(prompt.to("rbln"), **kwargs)
    stats = torch.rbln.compile_stats()
    assert torch.equal(tokens.cpu(), expected)
    assert stats.graph_captures > before.graph_captures and stats.graph_replays > before.graph_replays


def test_profiler_shows_replayed_kernels_linked_to_the_replay(cpu_x):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    static_x = cpu_x.to("rbln")
    g = torch.rbln.RBLNGraph()
    with torch.rbln.graph(g):
        y = (static_x @ static_x) + 1
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(2):
            g.replay()
        torch.rbln.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    assert [e.name for e in kernels].count("aten::mm") == 2 and [e.name for e in kernels].count("aten::add.Tensor") == 2
    replay = next(e for e in prof.key_averages() if e.key == "rbln::graph_replay")
    assert replay.count == 2 and replay.device_time_total > 0  # the kernels are linked to the replay call
    torch.testing.assert_close(y.cpu(), cpu_x @ cpu_x + 1)

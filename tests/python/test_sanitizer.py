"""The stream sanitizer (TORCH_RBLN_SANITIZER=1, torch_rbln.sanitizer).

Every program runs as a user runs it: a script file started with the
interpreter, the sanitizer switched on by the environment (or by
`torch_rbln.sanitizer.enable()`), its exit status checked. Racy programs must
fail with CSAN's report naming both ops and both streams; correct ones must
run clean. The last test runs a slice of this suite under the sanitizer.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT = "CSAN detected a possible data race"

# Shared by the scripts: a side stream ordered after the default stream's
# setup, so the only unordered accesses are the ones a script makes.
PRELUDE = """\
import torch
x = torch.ones(1 << 16, device="rbln")
side = torch.rbln.Stream()
side.wait_stream(torch.rbln.current_stream())
"""


def run_script(tmp_path, code: str, sanitize: bool = True, prelude: bool = True) -> subprocess.CompletedProcess:
    script = tmp_path / "program.py"
    script.write_text((PRELUDE if prelude else "") + textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k != "TORCH_RBLN_SANITIZER"}
    if sanitize:
        env["TORCH_RBLN_SANITIZER"] = "1"
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def line_of(tmp_path, marker: str) -> int:
    """Line number (1-based) of the script line ending with `# marker`."""
    lines = (tmp_path / "program.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# {marker}"))


def assert_race(tmp_path, proc, op, stream, previous_op, previous_stream):
    """The report names the current and the previous access (op and stream) with the script lines of both."""
    assert proc.returncode != 0, f"race not flagged:\n{proc.stdout}\n{proc.stderr}"
    err = proc.stderr
    assert REPORT in err, err
    assert "SanitizerErrors" in err, err
    current, _, previous = err.partition("Previous access by stream ")
    assert f"Access by stream {stream} during kernel:\n{op}" in current, err
    assert previous.startswith(f"{previous_stream} during kernel:\n{previous_op}"), err
    script = str(tmp_path / "program.py")
    assert f'File "{script}", line {line_of(tmp_path, "current")}' in current, err
    assert f'File "{script}", line {line_of(tmp_path, "previous")}' in previous.split("Tensor was allocated")[0], err


def assert_clean(proc):
    assert proc.returncode == 0, f"exit status {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert REPORT not in proc.stderr, proc.stderr
    assert proc.stdout.strip().endswith("ok"), proc.stdout  # the script ran to its end


SIDE = "1 on rbln:0"  # the first stream a process creates
DEFAULT = "0 on rbln:0"


# ------------------------------------------------------------------ racy programs


def test_write_on_side_stream_then_read_on_default_without_wait(tmp_path):
    proc = run_script(tmp_path, """
        with torch.rbln.stream(side):
            x.mul_(2)  # previous
        y = x + 1  # current
    """)
    assert_race(tmp_path, proc, "aten::add.Tensor", DEFAULT, "aten::mul_.Tensor", SIDE)
    assert "reading from argument(s) self" in proc.stderr and "writing to argument(s) self" in proc.stderr


def test_the_same_program_runs_without_the_sanitizer(tmp_path):
    proc = run_script(tmp_path, """
        with torch.rbln.stream(side):
            x.mul_(2)
        y = x + 1
        print("ok")
    """, sanitize=False)
    assert_clean(proc)


def test_write_on_default_stream_while_side_stream_reads(tmp_path):
    proc = run_script(tmp_path, """
        with torch.rbln.stream(side):
            y = x * 2  # previous
        x.add_(1)  # current
    """)
    assert_race(tmp_path, proc, "aten::add_.Tensor", DEFAULT, "aten::mul.Tensor", SIDE)


def test_event_recorded_but_never_waited_for(tmp_path):
    proc = run_script(tmp_path, """
        done = torch.rbln.Event()
        with torch.rbln.stream(side):
            x.mul_(2)  # previous
            done.record()
        y = x.sum()  # current
    """)
    assert_race(tmp_path, proc, "aten::sum", DEFAULT, "aten::mul_.Tensor", SIDE)


def test_event_recorded_before_the_write_does_not_order_it(tmp_path):
    proc = run_script(tmp_path, """
        early = torch.Event(device="rbln")
        with torch.rbln.stream(side):
            side.record_event(early)
            x.mul_(2)  # previous
        torch.rbln.current_stream().wait_event(early)
        y = x - 1  # current
    """)
    assert_race(tmp_path, proc, "aten::sub.Tensor", DEFAULT, "aten::mul_.Tensor", SIDE)


def test_synchronizing_another_device_does_not_order_this_one(tmp_path):
    proc = run_script(tmp_path, """
        with torch.rbln.stream(side):
            x.mul_(2)  # previous
        torch.rbln.synchronize(1)
        y = x * 3  # current
    """)
    assert_race(tmp_path, proc, "aten::mul.Tensor", DEFAULT, "aten::mul_.Tensor", SIDE)


def test_non_blocking_download_on_side_stream_races_with_a_write(tmp_path):
    proc = run_script(tmp_path, """
        with torch.rbln.stream(side):
            host = x.to("cpu", non_blocking=True)  # previous
        x.zero_()  # current
    """)
    assert_race(tmp_path, proc, "aten::zero_", DEFAULT, "aten::_to_copy", SIDE)


def test_non_blocking_upload_on_side_stream_races_with_a_read(tmp_path):
    proc = run_script(tmp_path, """
        pinned = torch.full((1 << 16,), 3.0).pin_memory()
        with torch.rbln.stream(side):
            x.copy_(pinned, non_blocking=True)  # previous
        y = x.sum()  # current
    """)
    assert_race(tmp_path, proc, "aten::sum", DEFAULT, "aten::copy_", SIDE)


def test_views_of_one_storage_share_their_accesses(tmp_path):
    proc = run_script(tmp_path, """
        with torch.rbln.stream(side):
            x[1000:].fill_(2)  # previous
        y = x[:10].clone()  # current
    """)
    assert_race(tmp_path, proc, "aten::clone", DEFAULT, "aten::fill_.Scalar", SIDE)


def test_enable_from_python(tmp_path):
    proc = run_script(tmp_path, """
        import torch
        import torch_rbln.sanitizer
        torch_rbln.sanitizer.enable()
        assert torch_rbln.sanitizer.is_enabled()
        x = torch.ones(1 << 16, device="rbln")  # previous
        side = torch.rbln.Stream()
        with torch.rbln.stream(side):
            x.mul_(2)  # current
    """, sanitize=False, prelude=False)
    assert_race(tmp_path, proc, "aten::mul_.Tensor", SIDE, "aten::ones", DEFAULT)
    assert "writing to the output" in proc.stderr


# ------------------------------------------------------------------ correct programs

CORRECT = {
    "wait_stream": """
        with torch.rbln.stream(side):
            x.mul_(2)
        torch.rbln.current_stream().wait_stream(side)
        assert torch.equal((x + 1).cpu(), torch.full((1 << 16,), 3.0))
    """,
    "wait_event": """
        done = torch.rbln.Event()
        with torch.rbln.stream(side):
            x.mul_(2)
            done.record()
        done.wait()
        y = x + 1
        # and back: the side stream reads y after waiting for the default stream's event
        e = torch.Event(device="rbln")
        torch.rbln.current_stream().record_event(e)
        side.wait_event(e)
        with torch.rbln.stream(side):
            z = y * 2
        torch.rbln.current_stream().wait_stream(side)
        assert torch.equal(z.cpu(), torch.full((1 << 16,), 6.0))
    """,
    **{name: f"""
        done = torch.rbln.Event()
        with torch.rbln.stream(side):
            x.mul_(2)
            done.record()
        {sync}
        x.add_(1)
        assert torch.equal(x.cpu(), torch.full((1 << 16,), 3.0))
    """ for name, sync in [("event_synchronize", "done.synchronize()"), ("stream_synchronize", "side.synchronize()")]},
    "device_synchronize": """
        with torch.rbln.stream(side):
            x.mul_(2)
        torch.rbln.synchronize()
        x.add_(1)
        torch.accelerator.synchronize()
        with torch.rbln.stream(side):
            x.mul_(2)
        torch.rbln.synchronize(0)
        assert torch.equal((x + 1).cpu(), torch.full((1 << 16,), 7.0))
    """,
    "blocking_download": """
        # x.cpu() and .item() wait for the stream, as on CUDA
        with torch.rbln.stream(side):
            x.mul_(2)
            host = x.cpu()
            total = x.sum().item()
        x.add_(1)
        assert torch.equal(host, torch.full((1 << 16,), 2.0)) and total == 2.0 * (1 << 16)
    """,
    "non_blocking_copies": """
        pinned = torch.full((1 << 16,), 3.0).pin_memory()
        with torch.rbln.stream(side):
            x.copy_(pinned, non_blocking=True)
            back = x.to("cpu", non_blocking=True)
        torch.rbln.current_stream().wait_stream(side)
        x.add_(1)
        side.synchronize()
        assert torch.equal(back, torch.full((1 << 16,), 3.0))
    """,
    "record_stream": """
        # allocated on the default stream, used on the side stream, freed while the side stream may run
        for step in range(3):
            t = torch.full((1 << 18,), float(step), device="rbln")
            side.wait_stream(torch.rbln.current_stream())
            with torch.rbln.stream(side):
                u = t * 2
                t.record_stream(side)
            del t
            fresh = torch.zeros(1 << 18, device="rbln")  # may reuse memory only once the side stream is done
            fresh.add_(1)
            torch.rbln.current_stream().wait_stream(side)
            assert torch.equal(u.cpu(), torch.full((1 << 18,), 2.0 * step))
    """,
    "training_step_on_side_stream": """
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("rbln")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data, target = torch.randn(8, 16).to("rbln"), torch.randn(8, 4).to("rbln")
        losses = []
        for _ in range(3):
            side.wait_stream(torch.rbln.current_stream())
            with torch.rbln.stream(side):
                loss = torch.nn.functional.mse_loss(model(data), target)
                opt.zero_grad()
                loss.backward()
                opt.step()
            torch.rbln.current_stream().wait_stream(side)
            losses.append(loss.item())
        assert losses[-1] < losses[0], losses
    """,
    "hugging_face_forward_on_side_stream": """
        import os
        os.environ["HF_HUB_OFFLINE"] = "1"
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
        model = LlamaForCausalLM(config).eval()
        ids = torch.randint(0, 64, (2, 8))
        expected = model(ids).logits
        model.to("rbln")
        ids = ids.to("rbln")
        side.wait_stream(torch.rbln.current_stream())
        with torch.no_grad(), torch.rbln.stream(side):
            logits = model(ids).logits
        torch.rbln.current_stream().wait_stream(side)
        torch.testing.assert_close(logits.cpu(), expected.detach(), rtol=1e-4, atol=1e-4)
    """,
}


@pytest.mark.parametrize("name", CORRECT)
def test_correct_program_runs_clean(tmp_path, name):
    proc = run_script(tmp_path, textwrap.dedent(CORRECT[name]) + "print('ok')\n")
    assert_clean(proc)


def test_suite_slice_runs_clean_under_the_sanitizer(tmp_path):
    """Existing stream, copy and training tests, run by pytest with TORCH_RBLN_SANITIZER=1."""
    files = ["tests/python/test_streams.py", "tests/python/test_copy.py", "tests/python/test_training.py"]
    code = ("import sys, pytest, torch, torch_rbln.sanitizer\n"
            "assert torch_rbln.sanitizer.is_enabled()\n"
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *{files!r}]))\n")
    env = {**os.environ, "TORCH_RBLN_SANITIZER": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert REPORT not in out, out
    assert re.search(r"\d+ passed", proc.stdout), out

"""`gradsleuth run --watch` and `gradsleuth.watch(...)` over whole runs: each anomaly kind found
in a realistic script at the right step and place, NaN traced to its op and line, the user's
training left bit-identical (even when a step is re-run to trace a NaN), TensorBoard files
that TensorBoard itself reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, report_of, run_gradsleuth

WATCH = ROOT / "tests" / "watch"


def _watch(script, tmp_path, *extra, env=None, script_args=()):
    out = tmp_path / "report.json"
    proc = run_gradsleuth(
        "run", "--watch", "--format", "json", "--out", out, *extra, script, *script_args, cwd=WATCH, env=env
    )
    assert out.exists(), proc.stderr[-3000:]
    report = report_of(out.read_text())
    assert report["command"] == "watch"
    return proc, report


def _only(report, code):
    found = [f for f in report["findings"] if f["code"] == code]
    assert len(found) == 1, json.dumps(report["findings"], indent=1)
    return found[0]


def test_a_backward_nan_is_traced_to_the_op_and_line(tmp_path):
    proc, report = _watch("prototype_nan.py", tmp_path)
    f = _only(report, "GS140")
    assert f["category"] == "nan" and f["steps"] == [25]
    assert "`SqrtBackward0`, the backward of `torch.sqrt` at line 23" in f["message"]
    assert f["location"]["line"] == 23 and "torch.sqrt(" in f["location"]["snippet"]
    assert f["params"] == ["proj.weight"]  # the first parameter hit; the rest followed
    statuses = {p["name"]: p["status"] for p in report["parameters"]}
    assert statuses["proj.weight"] == "nan"
    assert report["steps_observed"] == 60
    assert proc.returncode == 1


@pytest.mark.parametrize("loss", ["function", "module"])
def test_a_nan_born_in_the_loss_function_is_traced_to_its_line(tmp_path, loss):
    # The model runs three times per step (anchor, positive, negative) and the NaN is born in
    # the hand-written loss (a function, or a module without parameters): no re-run of the
    # model can see it, the loss probe does.
    args = ["--loss-module"] if loss == "module" else []
    _, report = _watch("pair_distance_nan.py", tmp_path, script_args=args)
    f = _only(report, "GS140")
    assert f["steps"] == [30]
    assert f["location"]["function"] == "contrastive_loss"
    assert "torch.sqrt(((za - zp) ** 2)" in f["location"]["snippet"]
    assert "`SqrtBackward0`, the backward of `torch.sqrt`" in f["message"]
    assert "in the loss computation outside the model" in f["message"]


def test_a_step_whose_forward_runs_in_a_closure_is_read_after_the_closure(tmp_path):
    # `opt.step(closure)`: the optimizer's pre-step hook runs before the closure's forward and
    # backward; the gradients are read when the closure returns, so the NaN is told at its own
    # step (12, not 13) and traced to the division in the closure, before the update used it.
    _, report = _watch("closure_temperature_nan.py", tmp_path)
    f = _only(report, "GS140")
    assert f["steps"] == [12], f
    assert "`Tensor.div`" in f["message"] and "in the loss computation outside the model" in f["message"]
    assert f["location"]["line"] == 18 and "/ tau" in f["location"]["snippet"]
    assert report["steps_observed"] == 15


def test_a_forward_nan_names_the_op_and_its_inputs(tmp_path):
    _, report = _watch("cosine_forward_nan.py", tmp_path)
    f = _only(report, "GS140")
    assert f["steps"] == [15]
    assert f["location"]["line"] == 20 and "z.norm(dim=-1" in f["location"]["snippet"]
    assert "first forward op with a non-finite output: `Tensor.div`" in f["message"]
    assert "16 zero(s)" in f["message"]  # the zero embedding that was divided


def test_an_exploding_step_is_caught(tmp_path):
    _, report = _watch("outlier_batch_explode.py", tmp_path)
    exploding = [f for f in report["findings"] if f["code"] == "GS141"]
    assert exploding and all(f["steps"] == [40] for f in exploding)
    assert {f["category"] for f in exploding} == {"exploding"}
    assert not [f for f in report["findings"] if f["severity"] == "error"]


def test_parameters_that_stop_learning_mid_run(tmp_path):
    _, report = _watch("curriculum_stop.py", tmp_path)
    f = _only(report, "GS144")
    assert sorted(f["params"]) == ["decoder.bias", "decoder.weight"]
    assert "last non-zero gradient at step 29" in f["message"]
    # The first steps (the tracer's) looked healthy: only the whole-run monitor sees it.
    statuses = {p["name"]: p["status"] for p in report["parameters"]}
    assert statuses["decoder.weight"] == "grad_none" and statuses["encoder.0.weight"] == "learning"


def test_a_dead_layer(tmp_path):
    _, report = _watch("dead_relu_init.py", tmp_path)
    f = _only(report, "GS143")
    assert f["category"] == "dead_path" and sorted(f["params"]) == ["0.bias", "0.weight"]
    assert not [x for x in report["findings"] if x["code"] == "GS199" and x["severity"] == "error"]


def test_healthy_runs_are_quiet(tmp_path):
    _, report = _watch(ROOT / "tests" / "cases" / "control_resnet_cnn" / "train.py", tmp_path)
    assert [f for f in report["findings"] if f["severity"] in ("error", "warning")] == []


def test_tensorboard_reads_the_event_files(tmp_path):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    tb = tmp_path / "tb"
    _watch("outlier_batch_explode.py", tmp_path, "--tensorboard", tb)
    files = list(tb.glob("events.out.tfevents.*"))
    assert len(files) == 1
    scalars = {}
    for event in EventFileLoader(str(files[0])).Load():
        for v in event.summary.value:
            # TensorBoard's loader turns simple_value into a tensor proto
            value = v.tensor.float_val[0] if v.tensor.float_val else v.simple_value
            scalars.setdefault(v.tag, []).append((event.step, value))
    total = scalars["grad_norm/total"]
    assert [s for s, _ in total] == list(range(1, 61))
    spike = max(total, key=lambda sv: sv[1])
    assert spike[0] == 40
    assert any(tag.startswith("update_ratio/") for tag in scalars)


# ---- the API, in process ---------------------------------------------------------------------


def _bits(t):
    import torch

    return t.detach().contiguous().view(torch.uint8) if t.is_floating_point() else t


def _train(watched: bool, nan_at: int = 12, steps: int = 20):
    """BatchNorm + dropout + a sqrt whose backward turns NaN at `nan_at`: the re-run that traces
    the NaN must restore RNG and buffers so training is bit-identical."""
    import gradsleuth
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 16, bias=False), nn.BatchNorm1d(16), nn.Dropout(0.3), nn.Linear(16, 6, bias=False)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    w = gradsleuth.watch(model, opt, status=False) if watched else None
    g = torch.Generator().manual_seed(5)
    for step in range(1, steps + 1):
        x = torch.randn(12, 6, generator=g)
        out = model(x)
        if step == nan_at:
            out = out * 0  # an all-zero batch of outputs: sqrt(0) below
        loss = torch.sqrt((out**2).sum(-1)).mean() + out.abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    state = {k: _bits(v).clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state().clone()
    report = None
    if w is not None:
        w.close()
        report = w.report()
    return state, rng, report


def test_watch_leaves_training_bit_identical_even_when_it_re_runs_a_step():
    import torch

    plain, rng_plain, _ = _train(False)
    watched, rng_watched, report = _train(True)
    assert plain.keys() == watched.keys()
    for k in plain:
        assert torch.equal(plain[k], watched[k]), k
    assert torch.equal(rng_plain, rng_watched)
    f = [x for x in report.findings if x["code"] == "GS140"]
    assert f and f[0]["steps"] == [12]
    # The NaN starts at the sqrt in the loss, outside the model: located there all the same.
    assert "`SqrtBackward0`, the backward of `torch.sqrt`" in f[0]["message"]
    assert "in the loss computation outside the model" in f[0]["message"]
    assert "torch.sqrt((out**2)" in f[0]["location"]["snippet"]


def test_gan_with_two_optimizers_and_a_scaler_storm():
    import gradsleuth
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    G, D = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_g, opt_d = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
    scaler = torch.amp.GradScaler("cpu")
    with gradsleuth.watch([G, D], [opt_g, opt_d], status=False) as w:
        for step in range(1, 61):
            z, real = torch.randn(16, 4), torch.randn(16, 8)
            d_loss = (D(G(z).detach()).mean() - D(real).mean()) * (1e38 if step > 25 else 1.0)
            opt_d.zero_grad()
            scaler.scale(d_loss).backward()
            scaler.step(opt_d)
            scaler.update()
            g_loss = -D(G(z)).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
    report = w.report()
    codes = {f["code"] for f in report.findings}
    assert "GS145" in codes, report.findings
    names = {p["name"] for p in report.parameters}
    assert {"0:weight", "1:weight"} <= names  # both models, both optimizers


@pytest.mark.parametrize("bad", ["{not json", '{"patience": "x"}'])
def test_bad_thresholds_are_a_clear_error(bad):
    import gradsleuth

    with pytest.raises(ValueError, match="watch thresholds"):
        from gradsleuth._core import Watcher

        Watcher([("w", "")], bad)
    assert callable(gradsleuth.watch)


def test_watch_report_renders_as_text(tmp_path):
    proc = run_gradsleuth("run", "--watch", "prototype_nan.py", cwd=WATCH)
    assert "error[GS140] nan" in proc.stdout
    assert "SqrtBackward0" in proc.stdout
    assert Path(WATCH / "prototype_nan.py").exists()


def test_html_report_draws_the_gradient_flow_over_the_run(tmp_path):
    from html.parser import HTMLParser

    out = tmp_path / "watch.html"
    run_gradsleuth("run", "--watch", "--format", "html", "--out", out, "outlier_batch_explode.py", cwd=WATCH)
    page = out.read_text()

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags = []

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, dict(attrs)))

    c = Collect()
    c.feed(page)
    svgs = [a.get("id") for t, a in c.tags if t == "svg"]
    assert svgs == ["autograd-graph", "grad-flow", "update-ratio"]
    layers = {a["data-layer"] for t, a in c.tags if t == "polyline" and a.get("class") == "layer"}
    assert layers == {"0", "2", "4"}
    codes = {a["data-code"] for t, a in c.tags if t == "div" and "data-code" in a}
    assert codes == {"GS141"}
    assert any(t == "table" and a.get("id") == "params" for t, a in c.tags)
    assert "http://" not in page and "https://" not in page  # works offline


def test_the_live_status_line(capsys):
    import gradsleuth
    import torch
    import torch.nn as nn

    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradsleuth.watch(model, opt, status=True):
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            opt.step()
    err = capsys.readouterr().err
    assert "gradsleuth watch · step 1 · no anomalies" in err


def test_an_anomaly_arms_an_op_level_step_that_finds_the_cut(tmp_path):
    """The encoder stops learning at step 30 (a detach switched on by an inverted flag): the
    monitor sees it stop, arms one op-level step, and that step finds the detach at its line."""
    _, report = _watch("warmup_detach.py", tmp_path)
    stopped = _only(report, "GS144")
    assert "encoder.0.weight" in stopped["params"]
    armed = [f for f in report["findings"] if f["message"].startswith("(op-level step armed by `stopped`")]
    assert armed, json.dumps(report["findings"], indent=1)
    (cut,) = [f for f in armed if f["category"] == "detach"]
    assert cut["location"]["line"] == 22 and "h.detach()" in cut["location"]["snippet"]
    assert "encoder.0.weight" in cut["params"]


def test_a_sqrt_of_zero_whose_result_is_only_logged_is_not_blamed(tmp_path):
    # Two sqrts of the same zero frames, the same parameters upstream: the re-run must not stop
    # at the dashboard's (its backward never runs) but at the feature's, which made the NaN.
    _, report = _watch("logged_energy_nan.py", tmp_path)
    f = _only(report, "GS140")
    assert f["steps"] == [12]
    assert f["location"]["line"] == 25 and "length = torch.sqrt(" in f["location"]["snippet"]
    assert "`SqrtBackward0`, the backward of `torch.sqrt` at line 25" in f["message"]


def test_a_nan_in_the_first_step_of_a_run_is_traced_keyword_inputs_and_all(tmp_path):
    # `run --watch` learns of the model from the run's tracer at its first call: that very
    # step (called with keyword arguments only) must be re-runnable.
    _, report = _watch("padded_lm_nan.py", tmp_path)
    f = _only(report, "GS140")
    assert f["steps"] == [1]
    assert "first forward op with a non-finite output: `Tensor.softmax`" in f["message"]
    assert f["location"]["line"] == 26 and "scores.softmax(" in f["location"]["snippet"]


def test_the_armed_op_level_step_ends_with_its_step_in_the_api_too():
    """`gradsleuth.watch(model, opt)` in a notebook, on the warm-up script's model: the encoder
    stops learning at step 30 and the next step is traced at op level. That tracer ends inside
    `backward()` (an op, to torch's function modes): its mode must not stay on torch's stack
    after it, where every later op of the session would go through it. And the report has
    nothing to say about a missing backward."""
    import runpy

    import gradsleuth
    import torch
    from torch.overrides import _get_current_function_mode_stack

    script = runpy.run_path(str(WATCH / "warmup_detach.py"))  # not as __main__: no training
    torch.manual_seed(0)
    model = script["Model"]()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with gradsleuth.watch(model, opt, status=False) as w:
        script["train"](model, opt)
        assert _get_current_function_mode_stack() == []
    report = w.report()
    armed = [f for f in report.findings if f["message"].startswith("(op-level step armed by `stopped`")]
    assert armed and armed[0]["category"] == "detach", report.findings
    assert "GS100" not in {f["code"] for f in report.findings}


def test_an_abandoned_forward_is_let_go_at_the_next_one():
    """Watch keeps the graph roots of a model's last forward (to tell, in a re-run, which ops
    reached the output). A forward whose output is dropped without backward (an evaluation
    forgotten outside `no_grad`) keeps its saved activations through those roots: only until
    the model's next forward, never longer, and nothing after `close()`."""
    import gc
    import weakref

    import gradsleuth
    import torch
    import torch.nn as nn

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            h = self.fc(x)
            self.last_hidden = weakref.ref(h)  # saved by sin for its backward (cos h)
            return torch.sin(h).sum(-1)

    model = Scale()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradsleuth.watch(model, opt, status=False) as w:
        model(torch.randn(4, 6)).mean().backward()
        opt.step()
        model(torch.randn(4, 6))  # evaluation without no_grad, output dropped
        abandoned = model.last_hidden
        gc.collect()
        assert abandoned() is not None  # held through the roots until the next forward
        model(torch.randn(4, 6)).mean().backward()
        gc.collect()
        assert abandoned() is None
        model(torch.randn(4, 6))
        last = model.last_hidden
    gc.collect()
    assert last() is None and w.closed


def test_a_nan_no_forward_value_explains_is_found_by_running_backward(tmp_path):
    # A "safe" sqrt behind torch.where: no zero goes in, the forward is finite, only a backward
    # with a check on every node finds the node whose gradient turns NaN.
    _, report = _watch("where_sqrt_nan.py", tmp_path)
    f = _only(report, "GS140")
    assert f["steps"] == [1]
    assert "`SqrtBackward0`, the backward of `torch.sqrt` at line 20" in f["message"]
    assert "torch.where(s > 0, torch.sqrt(s)" in f["location"]["snippet"]


class _HostReadCounter:
    """Counts the reads that make the host wait for a tensor's device (`.item()`, `.tolist()`,
    `.cpu()`, `.numpy()`, `bool`/`float`/`int` of a tensor, `.to` the CPU) by the code that
    made them: gradsleuth's, the user's (torch's own, such as GradScaler's found-inf check, are
    neither). The methods themselves are wrapped, not seen through a function mode: gradsleuth
    runs its own reads with torch function dispatch off, where no mode would see them."""

    NAMES = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__", "to")

    def __init__(self):
        import os

        import gradsleuth
        import torch

        self.pkg = os.path.dirname(gradsleuth.__file__)
        self.torch_dir = os.path.dirname(torch.__file__)
        self.ours, self.users = [], 0
        self._saved = {}
        self._depth = 0

    def _wrap(self, name, original):
        import sys

        def read(t, *args, **kwargs):
            # (a read forwarded by a function mode reaches here again, inside the first: one read)
            if self._depth == 0 and (name != "to" or any(str(a) == "cpu" for a in (*args, *kwargs.values()))):
                f = sys._getframe(1)  # the code that asked for the read
                if f.f_code.co_filename.startswith(self.pkg):
                    self.ours.append(f"{name} at {f.f_code.co_name}:{f.f_lineno}")
                elif not f.f_code.co_filename.startswith(self.torch_dir):
                    self.users += 1
            self._depth += 1
            try:
                return original(t, *args, **kwargs)
            finally:
                self._depth -= 1

        return read

    def __enter__(self):
        import torch

        for name in self.NAMES:
            self._saved[name] = torch.Tensor.__dict__.get(name)
            setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
        return self

    def __exit__(self, *exc):
        import torch

        for name, original in self._saved.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)


@pytest.mark.parametrize("reads", ["auto", "late"])
def test_a_watched_step_makes_no_host_read(monkeypatch, reads):
    # On a GPU a read makes the host wait for the step to finish: watch keeps its norms on the
    # device and reads them once they have landed in host memory. Counted on the CPU: zero
    # reads by gradsleuth in steady-state steps (a GradScaler, a sampled update-ratio step and
    # all), while the same counter sees the user's own `loss.item()`.
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if reads == "late":  # values delivered a step late, as from a GPU
        monkeypatch.setenv("GRADSLEUTH_WATCH_READS", "late")
    from gradsleuth import watch

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    w = watch(model, opt, status=False)
    for _ in range(5):  # start-up: the model first seen, buffers allocated
        step()
    counter = _HostReadCounter()
    with counter:
        for _ in range(25):  # through step 20, whose update ratios are sampled
            step()
    w.close()
    assert counter.ours == []
    assert counter.users == 25
    rec = json.loads(w.watchers()[0].record_json())
    assert rec["steps"] == 30
    assert all(p["grad_norm"]["count"] == 30 for p in rec["params"])
    assert any(p["update_ratio"]["count"] >= 1 for p in rec["params"])


def test_a_nan_read_a_step_late_is_re_run_where_it_recurs(tmp_path):
    # As on a GPU (the norms land a step after their step): an optimizer that skips non-finite
    # steps keeps the weights finite and the NaN recurs; the next step is re-run to the sqrt,
    # the report keeps the step the NaN started at.
    _, report = _watch("skipping_optimizer_nan.py", tmp_path, env={"GRADSLEUTH_WATCH_READS": "late"})
    f = _only(report, "GS140")
    assert f["steps"] == [12]
    assert "`SqrtBackward0`, the backward of `torch.sqrt` at line 21" in f["message"]
    assert f["location"]["line"] == 21


def test_a_nan_read_a_step_late_after_it_ruined_the_weights_is_said_not_blamed(tmp_path):
    # AdamW applied the NaN before its norms landed: a re-run would start from NaN weights and
    # blame whatever op reads them first. Said instead, with the weights it wrote NaN into.
    _, report = _watch("logged_energy_nan.py", tmp_path, env={"GRADSLEUTH_WATCH_READS": "late"})
    f = _only(report, "GS140")
    assert f["steps"] == [12]
    assert "step 12's update wrote NaN/Inf into `proj.weight`" in f["message"]
    assert "GRADSLEUTH_WATCH_READS=now" in f["message"]
    assert "SqrtBackward0" not in f["message"] and "softmax" not in f["message"]


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_a_watched_gpu_step_never_synchronizes():
    # torch raises on any synchronizing CUDA call while the debug mode is "error": watch's
    # steady-state steps (a sampled update step among them) must make none.
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from gradsleuth import watch

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 16, device="cuda"), torch.randint(0, 4, (64,), device="cuda")

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    w = watch(model, opt, status=False)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(25):
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    w.close()
    rec = json.loads(w.watchers()[0].record_json())
    assert rec["steps"] == 30

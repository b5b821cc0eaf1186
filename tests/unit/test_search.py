"""run_search on the simulator: every method, the memory guard, the budget, continuous re-allocation."""

import logging

import pytest

from intune_flow.errors import TuningError
from intune_flow.measurement import Measurement
from intune_flow.search import METHODS, run_search
from intune_flow.sim import SimEnv, oracle, sample_pipeline


def sim(index=0, cores=16, **kw):
    return SimEnv(sample_pipeline("test", index, cores=cores), seed=index, **kw)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_returns_best_at_least_start(method):
    env = sim(3)
    out = run_search(env, method, budget_s=1e9, max_steps=15, seed=0, progress=False)
    assert out.start is out.history[0]
    assert out.best.ok
    assert out.best.throughput >= out.start.throughput
    assert out.best.throughput == max(m.throughput for m in out.history if m.ok)
    assert out.steps == len(out.history) - 1 <= 15
    assert out.method == method
    if method == "intune":
        assert out.policy_state is not None and out.steps >= 1


def test_budget_is_spent_against_the_env_clock():
    env = sim(4)                       # 2.5 simulated seconds per measurement
    out = run_search(env, "random", budget_s=20.0, seed=1, progress=False)
    assert env.clock() <= 20.0 + 1e-9
    assert out.seconds == pytest.approx(env.clock())
    assert out.stopped == "budget" and out.steps == 7
    out = run_search(sim(4), "intune", budget_s=20.0, seed=1, progress=False)
    assert out.seconds <= 20.0 + 1e-9


def test_a_budget_the_start_left_unspent_holds_one_step():
    # 2.5 s per measurement: after a 2.5 s start, a 3 s budget fits no whole step by the
    # mean cost, yet returning the start alone would be a probe, not a search.
    out = run_search(sim(4), "random", budget_s=3.0, seed=1, progress=False)
    assert out.steps == 1 and out.seconds == pytest.approx(5.0)
    out = run_search(sim(4), "random", budget_s=2.0, seed=1, progress=False)   # the start spent it
    assert out.steps == 0 and out.stopped == "budget"


def test_oom_configs_are_abandoned_and_never_returned():
    # A memory-tight pipeline whose AUTOTUNE start (parallelism = cores) does not fit.
    env = None
    for i in range(200):
        cand = SimEnv(sample_pipeline("test", i, cores=32, mem_tightness=3.0), seed=i)
        if cand.true_throughput(cand.space.defaults()) == 0:
            env = cand
            break
    assert env is not None
    out = run_search(env, "intune", budget_s=1e9, max_steps=30, seed=0, progress=False)
    assert out.start.status == "oom"
    assert out.best.ok and out.best.peak_rss <= env.ram_budget
    ooms = [m for m in out.history if m.status == "oom"]
    oom_keys = {tuple(sorted(m.config.items())) for m in ooms}
    assert len(oom_keys) == len(ooms)                   # no OOM config is measured twice
    assert out.best.throughput >= 0.5 * oracle(env)[1]


class FailingEnv:
    """Wraps a SimEnv; configs with the first knob above a threshold error out."""

    def __init__(self, env, knob, limit):
        self.env, self.knob, self.limit = env, knob, limit
        self.space, self.cpu_budget, self.ram_budget = env.space, env.cpu_budget, env.ram_budget

    def clock(self):
        return self.env.clock()

    def measure(self, config):
        if config[self.knob] > self.limit:
            self.env._advance(1.0)
            return Measurement(config=dict(config), status="error", seconds=1.0, error="boom")
        return self.env.measure(config)


@pytest.mark.parametrize("method", ["intune", "hillclimb", "optuna"])
def test_errors_are_penalized_not_fatal(method):
    base = sim(6)
    knob = next(k.name for k in base.space if k.kind == "parallelism")
    env = FailingEnv(base, knob, 4)
    out = run_search(env, method, start=base.space.ones(), budget_s=1e9, max_steps=20, seed=0,
                     progress=False)
    assert out.best.ok and out.best.config[knob] <= 4


def test_a_pipeline_that_raises_at_its_defaults_ends_the_search_at_once():
    from intune_flow.progress import format_event
    base = sim(6)
    knob = next(k.name for k in base.space if k.kind == "parallelism")
    events = []
    out = run_search(FailingEnv(base, knob, -100), "intune", budget_s=1e9, max_steps=20,
                     seed=0, progress=events.append)
    assert [m.status for m in out.history] == ["error"] and out.stopped == "error"
    assert "no config ran (every probe failed; the first: error)" in format_event(events[-1])
    # A given start (a cached config) may fail for its own reason: the search goes on.
    start = dict(base.space.ones(), **{knob: 8})
    out = run_search(FailingEnv(base, knob, 4), "intune", start=start, budget_s=1e9,
                     max_steps=20, seed=0, progress=False)
    assert out.start.status == "error" and out.best.ok and out.best.config[knob] <= 4


def test_continuous_mode_reallocates_after_cores_shrink():
    env = sim(2, cores=32, core_schedule=[(60.0, 16)])
    before = oracle(SimEnv(env.pipeline, cores=32))[0]
    out = run_search(env, "intune", budget_s=200.0, seed=0, progress=False, continuous=True)
    assert env.cpu_budget == 16 and out.extra["final_cores"] == 16
    cut = out.extra["rebased_at"]
    assert 0 < cut < len(out.history)
    # The returned config was measured on the 16-core machine, after the change.
    assert any(m is out.best for m in out.history[cut - 2:])
    best16 = oracle(env)[1]
    assert env.true_throughput(out.best.config) >= 0.9 * best16
    assert out.seconds > 150            # kept tuning (and watching) for the whole budget
    assert before != out.best.config


def test_intune_beats_all_ones_clearly():
    env = sim(7, cores=32)
    out = run_search(env, "intune", start=env.space.ones(), budget_s=100.0, seed=0,
                     progress=False)
    ones = SimEnv(env.pipeline).true_throughput(env.space.ones())
    assert env.true_throughput(out.best.config) >= 3 * ones
    assert out.stopped in ("converged", "budget")


def test_the_done_line_says_when_the_end_of_search_looks_chose_the_best():
    from intune_flow.progress import format_event
    events = []
    out = run_search(sim(1), "intune", budget_s=40.0, seed=0, progress=events.append)
    done = events[-1]
    assert done["event"] == "done" and out.extra.get("best_looks")
    assert done["best_looks"] == out.extra["best_looks"]
    line = format_event(done)
    assert f"chosen on {out.extra['best_looks']} new look(s)" in line
    assert f"{out.extra['best_mean']:,.0f}/s" in line
    assert done["chosen_by"] == out.extra["chosen_by"] and done["chosen_by"].startswith("race")
    assert ("tie rule:" in line) == done["chosen_by"].endswith("tie rule")
    assert done.get("tie_broken") == out.extra.get("tie_broken")
    tied = format_event({**done, "chosen_by": "race, tie rule"})
    assert "tie rule: a config within the noise of the best" in tied
    assert "with fewer knobs at AUTOTUNE" in tied
    threads = format_event({**done, "chosen_by": "race, tie rule", "tie_broken": {
        "top_mean": 2.0, "chosen_mean": 1.9, "chosen_pool_threads": 3,
        "instead_pool_threads": 4}})
    assert "fewer pool threads on a busy CPU (3, not 4)" in threads
    assert "within the noise of the best (2/s) with" in threads     # the lead's figure
    memory = format_event({**done, "chosen_by": "race, tie rule", "tie_broken": {
        "top_mean": 2.0, "chosen_mean": 1.9, "chosen_rss": 3 << 30, "instead_rss": 8 << 30}})
    assert "at most two thirds of the memory (3,072 MiB, not 8,192 MiB)" in memory
    kept = format_event({**done, "chosen_by": "race, start kept"})
    assert "the start kept" in kept and "the start kept" not in tied
    hill = []
    run_search(sim(1), "hillclimb", budget_s=15.0, progress=hill.append)
    assert "new look" not in format_event(hill[-1])


def test_progress_events_and_log_lines(caplog):
    events = []
    run_search(sim(1), "hillclimb", budget_s=15.0, progress=events.append)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and "measure" in kinds
    last = [e for e in events if e["event"] == "measure"][-1]
    assert {"step", "config", "throughput", "best"} <= set(last)
    with caplog.at_level(logging.INFO, logger="intune_flow.search"):
        run_search(sim(1), "ones", budget_s=15.0, progress=None)
    assert any("best" in r.getMessage() for r in caplog.records)


def test_unknown_method_is_a_clear_error():
    with pytest.raises(TuningError, match="unknown search method"):
        run_search(sim(0), "magic")


def test_terminal_progress_line_rewrites_in_place():
    import io

    from intune_flow.progress import TerminalLine, make_progress
    buf = io.StringIO()
    run_search(sim(1), "random", budget_s=10.0, seed=0, progress=TerminalLine(buf))
    text = buf.getvalue()
    assert text.count("\r") >= 4 and text.endswith("\n") and text.count("\n") == 1
    assert "best" in text and "done after" in text
    with pytest.raises(TypeError):
        make_progress("loud")


@pytest.mark.slow
def test_pretrain_command_writes_policy_provenance_curve_and_log(tmp_path):
    import json

    from intune_flow.agent import load_policy
    from intune_flow.cli import main
    out = tmp_path / "p.safetensors"
    assert main(["pretrain", "--steps", "300", "--seed", "1", "--eval-every", "300",
                 "--out", str(out), "--log-dir", str(tmp_path / "log")]) == 0
    load_policy(out)
    prov = json.loads(out.with_suffix(".json").read_text())
    assert prov["seed"] == 1 and prov["steps"] == 300 and "pretrain" in prov["command"]
    assert (tmp_path / "log" / "training_curve.png").stat().st_size > 1000
    assert "held-out" in (tmp_path / "log" / "pretrain_log.txt").read_text()

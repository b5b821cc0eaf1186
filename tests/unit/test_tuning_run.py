"""The warm-start decision table of tune(), every row, on the simulator: no TensorFlow.

Each test runs :class:`TuningRun` on a :class:`SimTarget` (simulated pipeline and clock)
with a real in-process cache, and checks the ``source`` the README's table promises.
"""

import pytest

from intune_flow.cache import CacheUnavailable, MemoryCache
from intune_flow.cache.records import read
from intune_flow.errors import TuningError
from intune_flow.options import TuneOptions
from intune_flow.sim.generate import sample_pipeline
from intune_flow.sim.target import SimTarget
from intune_flow.tune import TuningPolicy, TuningRun

CORES = 8
RAM = 8 << 30


def _run(target, cache, *, cores=CORES, policy=TuningPolicy(), spent_s=0.0, **options):
    opts = TuneOptions.parse({"pipeline": target.name, "budget_s": 40, "method": "intune",
                              "progress": False, "seed": 0, **options})
    run = TuningRun(opts, target, cpu_budget=cores, ram_budget=RAM,
                    cache=cache,
                    make_env=target.make_env, policy=policy, spent_s=spent_s)
    return run.execute()


@pytest.fixture
def target():
    return SimTarget(sample_pipeline("test", 3, cores=CORES))


@pytest.fixture
def cache():
    return MemoryCache()


def test_a_miss_tunes_and_writes_a_record(target, cache):
    r = _run(target, cache)
    assert r.source == "tuned" and r.throughput >= r.start_throughput > 0
    stored = read(cache, r.cache_key).record
    assert stored is not None and stored.config == r.config
    assert stored.history["machine_capacity"] == 1.0


def test_a_hit_is_verified_and_used_without_a_search(target, cache):
    cold = _run(target, cache)
    warm = _run(target, cache)
    assert warm.source == "cache" and warm.config == cold.config
    assert 1 <= len(warm.history) <= 3 and warm.seconds_saved > 0


def test_a_slower_pipeline_is_refined_and_its_record_replaced(target, cache):
    cold = _run(target, cache)
    slowed = _run(target.slowed(4.0), cache)
    assert slowed.source == "refined" and "expected" in slowed.reason
    assert len([m for m in slowed.history]) > 3   # the looks, then a search
    stored = read(cache, cold.cache_key).record
    assert stored.throughput < cold.throughput    # the stale figure was replaced


def test_a_busy_machine_is_not_taken_for_drift(target, cache):
    _run(target, cache)
    busy = SimTarget(target.sim, speed=0.5)
    r = _run(busy, cache)
    assert r.source == "cache", r.reason
    assert "gives 50% of the CPU" in r.reason


def test_a_slower_pipeline_on_a_busy_machine_is_still_drift(target, cache):
    _run(target, cache)
    both = target.slowed(6.0)
    both.speed = 0.5
    assert _run(both, cache).source == "refined"


def test_without_load_scaling_a_busy_machine_refines(target, cache):
    _run(target, cache)
    r = _run(SimTarget(target.sim, speed=0.5), cache, policy=TuningPolicy(load_scaled=False))
    assert r.source == "refined"


def test_another_hardware_class_transfers(target, cache):
    eight = _run(target, cache, cores=CORES)
    four = _run(target, cache, cores=4)
    assert four.source == "transferred" and four.cache_key != eight.cache_key
    assert "started from the record for cpu8" in four.reason
    assert read(cache, four.cache_key).record is not None


def test_a_damaged_record_is_quarantined_and_retuned(target, cache):
    cold = _run(target, cache)
    cache.put(cold.cache_key, b"{not a record")
    r = _run(target, cache)
    assert r.source == "tuned" and "damaged" in r.reason
    assert any("quarantine" in k for k in cache.list(""))


def test_an_invalid_cached_config_is_quarantined_and_retuned(target, cache):
    cold = _run(target, cache)
    found = read(cache, cold.cache_key)
    record = found.record
    knob = target.sim.space.names[0]
    record.config = {**record.config, knob: target.sim.space[knob].max + 1}   # out of bounds
    cache.put(cold.cache_key, record.encode(), if_version=found.version)
    r = _run(target, cache)
    assert r.source == "tuned" and "cached config was invalid" in r.reason


class _Down(MemoryCache):
    """A cache whose backend is unreachable."""

    def get(self, key):
        raise CacheUnavailable("connection refused (test)")

    put = list = get


def test_an_outage_moves_to_the_local_fallback_cache(target):
    r = _run(target, _Down("down"))
    assert r.source == "tuned" and r.cache_uri != "memory://down"
    assert any("unavailable" in w for w in r.warnings)


def test_strict_turns_an_outage_into_a_tuning_error(target):
    with pytest.raises(TuningError, match="cache unavailable"):
        _run(target, _Down("down-strict"), strict=True)


def test_a_budget_the_start_spends_caches_nothing(target, cache):
    r = _run(target, cache, budget_s=1.0, window_s=2.0)
    assert r.source == "tuned" and r.config == r.start_config
    assert any("held no step" in w for w in r.warnings)
    # A measurement costs more than its window; the warning says which part is the window.
    assert any("held no step" in w and "a 2.00 s window" in w for w in r.warnings), r.warnings
    assert cache.records("") == []


def test_a_cold_search_the_budget_ends_in_its_first_jumps_says_so(target, cache):
    # A README-only trial's budget_s=5 returned all-AUTOTUNE at 16,000 records/s without a
    # word, where 20 s found 270,000: a search of a few measurements is its smart start only.
    short = _run(target, cache, budget_s=7.0, window_s=2.0)
    assert short.source == "tuned" and 1 < len(short.history) <= 5, len(short.history)
    # history ends with the confirming probe, which is not the search's
    assert any(f"held only {len(short.history) - 1} measurements" in w
               and "give budget_s at least" in w and "a 2.00 s window" in w
               for w in short.warnings), short.warnings
    full = _run(target, MemoryCache(), budget_s=40.0, window_s=2.0)
    assert not any("held only" in w for w in full.warnings), full.warnings
    # A scale-out's fallback tunes on what its attempt left of budget_s: the advice counts
    # the spent seconds back in (a README-only trial gave 25 s and was told "at least 13 s").
    advice = [w for w in short.warnings if "give budget_s at least" in w][0]
    after = _run(target, MemoryCache(), budget_s=7.0, window_s=2.0, spent_s=18.0)
    at_least = [w for w in after.warnings if "give budget_s at least" in w][0]

    def seconds(w):
        return float(w.rsplit("at least ", 1)[1].split(" s")[0])
    assert seconds(at_least) == pytest.approx(seconds(advice) + 18.0, abs=1.5)


def test_every_probe_failing_falls_back_to_the_cached_config(target, cache):
    cold = _run(target, cache)
    broken = SimTarget(target.sim, fail=True)
    r = _run(broken, cache)
    assert r.source == "fallback" and r.config == cold.config
    assert "using the cached config" in r.reason
    # The warnings hold what the run logged, the fallback first among them (a README-only
    # trial read result.warnings == [] on a run that had fallen back).
    assert [w for w in r.warnings if w.startswith("tuning failed (")] == [
        f"tuning failed ({r.reason.rsplit('; using', 1)[0]}); using the cached config so "
        "training can go on"]


def test_every_probe_failing_on_a_miss_falls_back_to_the_defaults(target, cache):
    r = _run(SimTarget(target.sim, fail=True), cache)
    assert r.source == "fallback" and r.config == target.sim.space.defaults()
    assert "every probe failed" in r.reason and cache.records("") == []
    # The defaults failed here too: no "so training can go on" (README-only trial 91: the
    # step's next build raised the same error the warning had said training would survive).
    assert r.reason.endswith("; using the factory defaults, which failed in this run too")
    assert [w for w in r.warnings if w.startswith("tuning failed (")] == [
        f"tuning failed ({r.reason.rsplit('; using', 1)[0]}); using the factory defaults, "
        "which failed in this run too: training will fail the same way until the pipeline "
        "is fixed"]


def test_strict_raises_instead_of_falling_back(target, cache):
    with pytest.raises(TuningError, match="every probe failed"):
        _run(SimTarget(target.sim, fail=True), cache, strict=True)


def _capped(pipeline, cap):
    """``pipeline`` with every parallelism and pool knob bounded at ``cap``."""
    import dataclasses

    from intune_flow.knobs import THREAD_KINDS, KnobSpace
    knobs = tuple(dataclasses.replace(k, max=min(k.max, cap), default=min(k.default, cap))
                  if k.kind in THREAD_KINDS else k for k in pipeline.space)
    return dataclasses.replace(pipeline, space=KnobSpace(knobs))


def test_a_knob_left_at_its_max_is_reported_only_while_the_cpu_had_room(cache):
    from intune_flow.knobs import THREAD_KINDS

    def at_max(r, space):
        return [k.name for k in space if k.kind in THREAD_KINDS and r.config[k.name] == k.max]

    # Bounded at 4 on 8 cores the stages leave the CPU half idle: the bounds bind.
    roomy = SimTarget(_capped(sample_pipeline("test", 2, cores=8), 4))
    r = _run(roomy, cache, cores=8)
    best = next(m for m in r.history if m.config == r.config and m.ok)
    named = [w for w in r.warnings if "was tuned to its max" in w]
    assert best.cpu_util < 0.8 and at_max(r, roomy.sim.space)
    assert len(named) == len(at_max(r, roomy.sim.space)), named
    again = _run(roomy, cache, cores=8)          # the next night's hit says it too
    assert again.source == "cache", again.reason
    assert [w for w in again.warnings if "was tuned to its max" in w] == named
    # Bounded at 2 on 2 cores they keep it busy: more calls would take turns, no warning.
    busy = SimTarget(_capped(sample_pipeline("test", 2, cores=2), 2))
    r = _run(busy, MemoryCache(), cores=2)
    best = next(m for m in r.history if m.config == r.config and m.ok)
    assert best.cpu_util >= 0.8 and at_max(r, busy.sim.space)
    assert not [w for w in r.warnings if "was tuned to its max" in w], r.warnings


def test_a_refine_gets_at_least_four_measurements_of_its_looks_cost():
    policy = TuningPolicy()
    assert policy.warm_budget(20.0) == 5.0                      # a quarter, at least 5 s
    assert policy.warm_budget(20.0, per_measurement=2.0) == 8.0
    assert policy.warm_budget(100.0, per_measurement=2.0) == 25.0
    assert policy.warm_budget(20.0, per_measurement=9.0) == 20.0   # never over budget_s


def test_a_short_refine_still_searches_past_its_start(target, cache):
    # A README-only trial's nightly DAG at budget_s=20: the refine's 5 s held the cached
    # config and one step (here 2.5 s each), too few to move off a lucky record.
    _run(target, cache, budget_s=20, window_s=2.0)
    slowed = _run(target.slowed(4.0), cache, budget_s=20, window_s=2.0)
    assert slowed.source == "refined"
    looks = TuningPolicy().verify_looks
    searched = slowed.history[looks:-1]         # after the looks, before the confirming probe
    assert len(searched) >= TuningPolicy().warm_min_measurements


def test_a_search_with_no_move_open_caches_its_start(cache):
    # A search that converged without a move open has its answer in its start (the refine
    # of an all-AUTOTUNE config whose choices the probe did not read, here a pipeline whose
    # knobs are all fixed): cached, not refused as "held no step".
    import dataclasses

    from intune_flow.knobs import KnobSpace
    pipe = sample_pipeline("test", 2, cores=CORES)
    fixed = KnobSpace(tuple(dataclasses.replace(k, max=k.min, default=k.min)
                            for k in pipe.space))
    r = _run(SimTarget(dataclasses.replace(pipe, space=fixed)), cache)
    assert r.source == "tuned" and r.config == r.start_config
    assert not any("held no step" in w for w in r.warnings), r.warnings
    assert read(cache, r.cache_key).record is not None


def test_a_confirming_probe_far_below_the_search_s_figure_is_said():
    from intune_flow.measurement import STATUS_ERROR, Measurement
    policy = TuningPolicy()
    cfg = {"read": 16, "threadpool": 32}
    best = Measurement(config=cfg, throughput=24_505.0)
    # A README-only trial's search beside a busy job: its probe read under half the window.
    said = policy.doubted(best, Measurement(config=cfg, throughput=11_666.0))
    assert "read 11,666 records/s, 0.48 of the search's best window" in said
    assert "the cache stored the lower figure" in said
    assert "a short search chooses on one window" in said and "--repeat 5" in said
    # Within the noise of a 2-core machine, or no probe to read: nothing is said.
    assert policy.doubted(best, Measurement(config=cfg, throughput=17_000.0)) is None
    assert policy.doubted(best, Measurement(config=cfg, status=STATUS_ERROR)) is None
    assert policy.doubted(best, None) is None


def test_a_cache_hit_s_line_says_its_autotune_ratio_is_the_tuning_night_s():
    from intune_flow.result import TuneResult
    tuned = TuneResult(config={"read": 4}, throughput=32_081.0, autotune_throughput=22_915.0)
    assert "(1.4 times AUTOTUNE) " in tuned.summary()
    hit = TuneResult(config={"read": 4}, throughput=32_081.0, vs_autotune=1.4, source="cache")
    assert "(1.4 times AUTOTUNE when tuned) " in hit.summary()
    assert TuneResult(config={"read": 4}, throughput=1.0).versus_autotune() == ""


def test_a_search_whose_confirming_probe_reads_far_lower_warns(cache):
    class LowProbe(SimTarget):
        """Every measurement after the search's (the confirming probe) reads a third."""

        def make_env(self, **kw):
            env = super().make_env(**kw)
            measure, seen = env.measure, []

            def slow_last(config, **kw):
                m = measure(config, **kw)
                seen.append(m)
                if len(seen) > self.after:
                    m.throughput /= 3
                return m
            env.measure = slow_last
            return env

    quiet = _run(SimTarget(sample_pipeline("test", 3, cores=CORES)), cache)
    assert not any("confirming probe" in w for w in quiet.warnings), quiet.warnings
    low = LowProbe(sample_pipeline("test", 3, cores=CORES))
    low.after = len(quiet.history) - 1          # the same search, then its probe
    r = _run(low, MemoryCache())
    assert any("confirming probe of the chosen config read" in w for w in r.warnings), \
        r.warnings


class LuckyStart(SimTarget):
    """The search's windows of its start config read 20 times its rate (one lucky window
    repeated); tune()'s own probes (they pass ``window_s``) read the truth, and with
    ``others`` those of every other config read that share of it."""

    others = 1.0

    def make_env(self, **kw):
        env = super().make_env(**kw)
        measure, first = env.measure, []

        def lucky(config, **kw):
            m = measure(config, **kw)
            first.append(dict(config)) if not first else None
            if config == first[0] and "window_s" not in kw:
                m.throughput *= 20
            elif config != first[0] and "window_s" in kw:
                m.throughput *= self.others
            return m
        env.measure = lucky
        return env


def test_a_doubted_best_loses_to_a_runner_up_its_own_probe_reads_higher():
    # A generality search on a busy 2-core machine chose a config on a window of 39,473
    # records/s; its confirming probe read 5,032, the config's usual rate, and the config
    # was returned (0.17 of the best known). The runner-up now gets a probe of its own.
    quiet = _run(SimTarget(sample_pipeline("test", 3, cores=CORES)), MemoryCache())
    assert not any("returned instead" in w for w in quiet.warnings), quiet.warnings
    r = _run(LuckyStart(sample_pipeline("test", 3, cores=CORES)), MemoryCache())
    *searched, confirm, second = r.history
    lucky = searched[0].config
    assert confirm.config == lucky != r.config == second.config
    runner = max((m for m in searched if m.ok and m.config != lucky), key=lambda m: m.throughput)
    assert r.config == runner.config and r.throughput == runner.throughput
    assert any("is returned instead" in w for w in r.warnings), r.warnings
    # A runner-up whose probe reads no higher leaves the choice, and the doubt, as they were.
    stuck = LuckyStart(sample_pipeline("test", 3, cores=CORES))
    stuck.others = 0.01
    r = _run(stuck, MemoryCache())
    *searched, second, confirm = r.history
    assert r.config == confirm.config == searched[0].config != second.config
    assert not any("returned instead" in w for w in r.warnings), r.warnings
    assert any("confirming probe of the chosen config read" in w for w in r.warnings)


def test_configs_that_failed_during_the_search_are_named_in_the_warnings(target, cache):
    # README-only trial 71: a factory that refused more lookups than a cap (ValueError) left
    # only a status in result.history; the search steers away, the user was not told.
    from intune_flow.measurement import Measurement

    assert not any("configs this search measured failed" in w for w in _run(target, cache).warnings)
    knob = next(k.name for k in target.sim.space if k.kind == "parallelism")
    made, cap = target.make_env, {}

    def capped(**kw):
        env = made(**kw)
        real = env.measure

        def measure(config, **kw2):
            cap.setdefault("at", config[knob])     # the start's value runs
            if config[knob] > cap["at"]:
                env._advance(0.5)
                return Measurement(config=dict(config), status="error", seconds=0.5,
                                   error="ValueError: connection cap exceeded")
            return real(config, **kw2)

        env.measure = measure
        return env

    target.make_env = capped
    r = _run(target, MemoryCache())
    failed = [m for m in r.history if m.status == "error"]
    assert r.source == "tuned" and failed and r.config[knob] <= cap["at"]
    said = [w for w in r.warnings if "configs this search measured failed" in w]
    assert len(said) == 1 and f"{len(failed)} of the" in said[0]
    assert "connection cap exceeded" in said[0] and "bound that knob" in said[0]

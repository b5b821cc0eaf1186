"""Issue 21: the policy ablation and the generality suite, on tiny configurations."""

import psutil
import pytest


def _sim_env(index=3, cores=16):
    from intune_flow.sim import SimEnv, sample_pipeline
    return SimEnv(sample_pipeline("eval", index, cores=cores), seed=0)


def test_the_ablation_variants_are_a_switch_of_the_search():
    from intune_flow.errors import TuningError
    from intune_flow.search import VARIANTS, run_search

    assert set(VARIANTS) == {"shipped", "uniform", "bare"}
    with pytest.raises(TuningError, match="unknown intune variant"):
        run_search(_sim_env(), "intune", variant="greedy", budget_s=1e9, max_steps=3)
    # Bare: the policy's single-knob moves only (no smart-start jumps), so every config
    # measured differs from one measured before it in exactly one knob.
    out = run_search(_sim_env(), "intune", variant="bare", budget_s=1e9, max_steps=12, seed=0,
                     progress=False)
    seen = [out.history[0].config]
    for m in out.history[1:]:
        assert any(sum(m.config[k] != c[k] for k in c) == 1 for c in seen) or m.config in seen
        seen.append(m.config)
    # Uniform: the same search, reproducible from its seed, and not the policy's walk.
    uni = [run_search(_sim_env(), "intune", variant="uniform", budget_s=1e9, max_steps=15,
                      seed=s, progress=False) for s in (1, 1, 2)]
    assert [m.config for m in uni[0].history] == [m.config for m in uni[1].history]
    shipped = run_search(_sim_env(), "intune", budget_s=1e9, max_steps=15, seed=1,
                         progress=False)
    assert {str(m.config) for m in shipped.history} != {str(m.config) for m in uni[0].history} \
        or {str(m.config) for m in uni[2].history} != {str(m.config) for m in uni[0].history}


def test_ablation_sim_cells_and_readme_block(tmp_path):
    from benchmarks import ablation

    cells = ablation.run_sim(2, (8,), (4, 8), log=lambda *a: None)
    assert len(cells) == 2 * len(ablation.METHODS)
    for c in cells:
        assert c["n"] == 2 and 0.0 <= c["p10"] <= c["median"] <= 1.0 + 1e-9
    data = {"meta": {"mode": "quick", "methods": list(ablation.METHODS), "pipelines": 2,
                     "cores": [8], "steps": [4, 8], "budgets": [], "cases": [],
                     "machine": {"date": "today", "usable_cpus": 2}, "command": "x"},
            "sim": cells, "real": []}
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{ablation.START}\nstale\n{ablation.END}\nafter\n")
    ablation.write_outputs(data, tmp_path, readme)
    text = readme.read_text()
    assert "stale" not in text and text.endswith("after\n")
    assert "(b) uniform moves" in text and "| 8 |" in text and "(a) vs (b)" in text
    assert (tmp_path / "ablation.png").stat().st_size > 1000
    assert (tmp_path / "ablation.json").exists() and (tmp_path / "ablation.md").exists()


@pytest.mark.slow
def test_ablation_real_case_measures_every_variant_side_by_side():
    from benchmarks import ablation
    from benchmarks.real_pipelines import Case

    case = Case("sleepy", "tests.test_probe:sleepy", "blocking 5 ms calls", {"delay_ms": 5.0})
    methods = ("intune", "intune:uniform", "intune:bare", "random")
    out = ablation.run_real(case, (1.5,), 1, methods=methods, log=lambda *a: None)
    assert set(out["picks"]) == {f"{m}@1.5" for m in methods}
    top = max(p["throughput"]["median"] for p in out["picks"].values())
    for p in out["picks"].values():
        assert p["measurements"] >= 1 and p["throughput"]["n"] == 1
        assert p["ratio_to_best"] == pytest.approx(p["throughput"]["median"] / top)


@pytest.mark.slow
def test_generality_pipelines_all_build_with_their_knobs(tmp_path):
    from benchmarks.generality_pipelines import CASES, prepare
    from intune_flow.pipeline import Pipeline

    kwargs = prepare(tmp_path)
    assert len(CASES) >= 8 and len(kwargs["interleave"]["files"]) == 64
    frameworks = set()
    for name, case in CASES.items():
        p = Pipeline.load(case.factory, **kwargs[name])
        assert len(p.space) >= 2, name
        frameworks.add(p.framework)
        if name == "own_pool":      # the first unseen shape: its own pool knob
            assert p.describe().pool_knob == "pool" and "threadpool" not in p.space
        if name == "prebatched":    # elements that are 1024-row blocks count their rows
            assert p.describe().batched and p.batch_size == 1024
    assert frameworks == {"tf.data", "torchdata", "torch.utils.data"}


@pytest.mark.slow
def test_generality_case_is_measured_side_by_side_and_refreshes_its_block(tmp_path):
    from benchmarks import generality
    from benchmarks.generality_pipelines import CASES

    case = CASES["td_processes"]
    out = generality.run_case(case, {}, budgets=(2.0,), repeats=1, window_s=0.3,
                              long_budget_s=0.0, cpu_load=0.25, log=lambda *a: None)
    assert not [c for c in psutil.Process().children(recursive=True)
                if "spawn_main" in " ".join(c.cmdline())]      # the load's loops stopped
    picks = out["picks"]
    assert {"autotune", "tune2", "grid"} <= set(picks)
    trace = picks["tune2"]["trace"]      # the search's windows, kept to read a miss by
    assert len(trace) == picks["tune2"]["measurements"] >= 1
    assert trace[0]["status"] and set(trace[0]["config"]) == set(picks["autotune"]["config"])
    top = max(p["throughput"]["median"] for p in picks.values())
    assert picks[out["best_known"]]["throughput"]["median"] == top
    for p in picks.values():
        assert p["ratio_to_best"] == pytest.approx(p["throughput"]["median"] / top)
    assert set(out["targets"]) == {"2"}
    assert out["targets"]["2"]["met"] == (picks["tune2"]["ratio_to_best"] >= 0.90)
    assert out["targets"]["2"]["met"] or out["targets"]["2"]["reason"]
    data = {"meta": {"mode": "quick", "budgets": [2.0], "repeats": 1, "window_s": 0.3,
                     "long_budget_s": 0.0, "command": "x", "cpu_load": 0.25,
                     "machine": {"usable_cpus": 2, "date": "today"}}, "cases": [out]}
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{generality.START}\nstale\n{generality.END}\nafter\n")
    generality.write_outputs(data, tmp_path, readme)
    text = readme.read_text()
    assert "stale" not in text and "| td_processes |" in text and text.endswith("after\n")
    assert "other processes kept 25% of the CPU busy (`--cpu-load`)" in text
    assert (tmp_path / "generality.png").stat().st_size > 1000


def test_the_generality_grid_scales_every_stage_together():
    from benchmarks.generality import grid
    from intune_flow.knobs import Knob, KnobSpace

    space = KnobSpace((Knob("a", "parallelism", 1, 8, 1), Knob("b", "parallelism", 1, 64, 1),
                       Knob("p", "buffer", 1, 16, 1)))
    configs = grid(space)
    assert configs[0] == {"a": 1, "b": 1, "p": 8}
    assert configs[-1]["b"] == 64 and configs[-1]["a"] == 8
    assert len({str(c) for c in configs}) == len(configs)
    assert all(c["p"] == 8 for c in configs)


def test_the_generality_table_names_the_configs_that_mix_autotune_with_set_knobs():
    from benchmarks import generality

    def pick(config, ratio):
        return {"config": config, "ratio_to_best": ratio}
    data = {"cases": [{"case": "two", "picks": {
        "autotune": pick({"a": -1, "shuffle": 64}, 0.5),        # the baseline: not a mix
        "tune60": pick({"a": -1, "b": 4}, 1.0),
        "grid": pick({"a": 4, "b": 4}, 0.9)}}]}
    line = generality.hybrids(data)
    assert "two tune60 1.00 (a at AUTOTUNE)" in line and "autotune" not in line.split(":")[1]
    assert generality.hybrids({"cases": [{"case": "x", "picks": {"grid": pick({"a": 1}, 1)}}]}) == ""


@pytest.mark.slow
def test_the_memory_case_alone_gets_a_budget_its_search_fits_in(tmp_path):
    # In a fresh process the case's RAM budget (RSS + headroom) must already hold TensorFlow's
    # runtime and torch (the search's policy): taken before them, every probe passed it.
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "benchmarks.generality", "--cases", "memory", "--budgets", "3",
           "--repeats", "1", "--window-s", "0.3", "--long-budget-s", "0", "--out",
           str(tmp_path), "--no-readme"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tuning failed" not in done.stdout + done.stderr
    tuned = json.loads((tmp_path / "generality.json").read_text())["cases"][0]["picks"]["tune3"]
    assert tuned["source"] == "tuned" and tuned["trace"][0]["status"] == "ok"


def test_generality_compare_measures_named_configs_side_by_side(tmp_path, capsys):
    from benchmarks import generality

    configs = '{"one": {"first": 1, "second": 1}, "auto": {"second": -1}}'
    argv = ["--cases", "two_maps", "--repeats", "2", "--window-s", "0.3",
            "--out", str(tmp_path), "--compare", configs]
    assert generality.main(argv) == 0
    import json
    data = json.loads((tmp_path / "generality_compare.json").read_text())
    (case,) = data["cases"]
    assert case["ram_budget"] is None       # only the memory case states a RAM headroom
    rows = case["configs"]
    assert set(rows) == {"one", "auto"}
    assert rows["one"]["config"] == {"first": 1, "second": 1, "prefetch": 1, "threadpool": -1}
    assert rows["auto"]["config"]["second"] == -1 and rows["auto"]["config"]["first"] == 1
    assert all(len(r["statuses"]) == 2 for r in rows.values())     # two repeats each
    assert max(r["ratio_to_best"] for r in rows.values()) == pytest.approx(1.0)
    # What the search reads: the static maps' busy shares (AUTOTUNE's pool has none).
    assert {"first", "second"} <= set(rows["one"]["signals"])
    assert all(0.0 <= v <= 1.0 for v in rows["one"]["signals"].values())
    assert "--compare" in data["meta"]["command"] and '"first"' in data["meta"]["command"]
    table = (tmp_path / "generality_compare.md").read_text()
    assert "| two_maps | one | first=1, second=1" in table and "| first " in table
    assert not (tmp_path / "generality.json").exists()    # the suite's table is left alone


@pytest.mark.parametrize("bad, says", [
    ("{not json", "--compare is not JSON"),
    ('["a"]', "named configs"),
    ('{"a": {"nope": 2}}', "unknown knob(s) ['nope']"),
    ('{"a": {"first": 99}}', "outside its bounds"),
])
def test_generality_compare_names_a_bad_config_before_measuring(bad, says, tmp_path, capsys):
    from benchmarks import generality

    with pytest.raises(SystemExit) as e:
        generality.main(["--cases", "two_maps", "--out", str(tmp_path), "--compare", bad])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not list(tmp_path.iterdir())

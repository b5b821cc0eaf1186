"""The benchmark harness itself: a tiny real pipeline through every method, then the report."""

import pytest


def test_interleaved_measures_a_config_found_twice_once_per_repeat():
    from benchmarks.common import interleaved
    from intune_flow.measurement import Measurement

    calls = []

    def measure(config):
        calls.append(dict(config))
        return Measurement(config=dict(config), throughput=float(len(calls)), status="ok")

    runs = interleaved(measure, {"a": {"x": 1, "y": 2}, "b": {"x": 2, "y": 2},
                                 "c": {"y": 2, "x": 1}}, 3, log=lambda *_: None)
    assert calls == [{"x": 1, "y": 2}, {"x": 2, "y": 2}] * 3     # a, b interleaved; c is a's
    assert [m["throughput"] for m in runs["a"]] == [1.0, 3.0, 5.0]
    assert [m["throughput"] for m in runs["b"]] == [2.0, 4.0, 6.0]
    assert runs["c"] == runs["a"] and runs["c"] is not runs["a"]


def test_the_second_pass_scores_each_method_against_the_winner_with_fresh_measurements():
    from benchmarks.real_pipelines import second_pass
    from intune_flow.measurement import Measurement

    # First pass: optuna won by noise. Second pass: its config and intune's measure alike.
    picks = {n: {"config": {"x": i}} for i, n in enumerate(
        ("ones", "hillclimb", "random", "optuna", "intune_cold", "intune_warm"))}
    picks["intune_warm"]["config"] = picks["intune_cold"]["config"]
    first = {"ones": 10, "hillclimb": 80, "random": 85, "optuna": 100, "intune_cold": 88,
             "intune_warm": 88}
    rows = {n: {"throughput": {"median": float(v)}, "ram_violations": 0} for n, v in first.items()}
    again = {0: 10.0, 1: 70.0, 2: 90.0, 3: 90.0, 4: 99.0}
    measured = []

    def measure(config):
        measured.append(config["x"])
        return Measurement(config=dict(config), throughput=again[config["x"]], status="ok")

    out = second_pass(measure, picks, rows, 3, log=lambda *_: None)
    assert out["winner"] == "optuna" and out["throughput"]["median"] == 90.0
    assert sorted(set(measured)) == [1, 2, 3, 4] and len(measured) == 12   # not ones, warm = cold
    assert rows["optuna"]["ratio_to_winner_2nd"] == 1.0
    assert rows["intune_cold"]["ratio_to_winner_2nd"] == 1.1
    assert rows["hillclimb"]["ratio_to_winner_2nd"] == pytest.approx(70 / 90, abs=1e-3)
    assert rows["intune_cold"]["ratio_to_winner_2nd_ci"] == [1.1, 1.1]   # no noise, no width
    assert "ratio_to_winner_2nd" not in rows["ones"]


def test_the_paired_ratio_cancels_drift_between_rounds_and_shows_its_uncertainty():
    from benchmarks.real_pipelines import paired_ratio

    # The machine slows down and speeds up between rounds; within a round, 5% apart.
    winner = [100.0, 300.0, 200.0, 150.0, 250.0]
    method = [0.95 * w for w in winner]
    ratio, (lo, hi) = paired_ratio(method, winner)
    assert ratio == pytest.approx(0.95) and lo == pytest.approx(0.95) and hi == pytest.approx(0.95)
    # Noisy rounds: the interval widens and holds the true share.
    noisy = [w * f for w, f in zip(winner, (0.85, 1.05, 0.95, 1.0, 0.9))]
    ratio, (lo, hi) = paired_ratio(noisy, winner, seed=1)
    assert ratio == pytest.approx(0.95) and lo < 0.95 < hi and hi - lo > 0.05
    assert paired_ratio([1.0], [0.0]) == (0.0, (0.0, 0.0))   # a failed reference: no rounds


@pytest.mark.slow
def test_real_case_measures_every_method_side_by_side_and_renders():
    from benchmarks.real_pipelines import Case, run_case
    from benchmarks.report import headline, real_table

    case = Case("sleepy", "tests.test_probe:sleepy", "blocking 5 ms calls", {"delay_ms": 5.0},
                ram_headroom_mib=512)
    logged = []
    out = run_case(case, budget_s=6.0, repeats=2, window_s=0.3, long_budget_s=0.0,
                   log=logged.append)
    rows = out["methods"]
    assert {"ones", "autotune", "heuristic", "hillclimb", "random", "optuna", "intune_cold",
            "intune_warm", "best_found"} <= set(rows)
    for name, r in rows.items():
        assert r["throughput"]["n"] == 2 and r["statuses"] == ["ok", "ok"], name
        assert r["ram_violations"] == 0 and r["crashes"] == 0, name
    assert rows["intune_warm"]["source"] in ("cache", "refined")
    # Tuning seconds are reported for both runs (how much the warm one saves is the
    # benchmark's finding, in its tables, not something a busy test machine can assert).
    assert all(rows[n]["tuning_seconds"] > 0 and rows[n]["measurements"] >= 1
               for n in ("intune_cold", "intune_warm"))
    # Ratios are computed from the measured medians, never typed in.
    best = max(r["throughput"]["median"] for r in rows.values())
    for r in rows.values():
        assert r["ratio_to_best"] == pytest.approx(r["throughput"]["median"] / best, abs=1e-3)
    # Every method's measured median has its share (whether a search beats all knobs at
    # one is the benchmark's result, reported in its tables).
    assert all(0 < r["ratio_to_best"] <= 1.0 for r in rows.values())
    assert out["ram_headroom_mib"] == 512
    real = {"cases": [out], "command": "python -m benchmarks --quick",
            "machine": {"usable_cpus": 2, "host_cpus": 2, "cpu_model": "x", "ram_gib": 1.0,
                        "date": "today"}}
    table = real_table(real)
    assert "| intune_cold |" in table and "512 MiB over the process's RSS" in table
    assert any("interleaved" in line for line in logged)
    assert out["second_pass"]["winner"] in rows and "2nd pass: the winner" in table
    assert rows["intune_cold"]["ratio_to_winner_2nd"] > 0
    block = headline({**real, "cases": [out]}, None, None)
    assert "| sleepy |" in block


@pytest.mark.slow
def test_budget_sweep_scores_every_seed_from_side_by_side_measurements(tmp_path):
    from benchmarks.budget_sweep import METHODS, plot, run_case, table
    from benchmarks.real_pipelines import Case

    case = Case("sleepy", "tests.test_probe:sleepy", "blocking 5 ms calls", {"delay_ms": 5.0})
    out = run_case(case, budgets=[1.5], seeds=2, repeats=1, window_s=0.2, log=lambda *a: None)
    assert len(out["searches"]) == 2 * len(METHODS)
    top = max(out["medians"].values())
    for s in out["searches"]:      # each share comes from its config's measured median
        name = next(n for n, c in out["configs"].items() if c == s["config"])
        assert s["share"] == pytest.approx(out["medians"][name] / top, abs=1e-3)
    for method in METHODS:
        cell = out["cells"][f"{method}@1.5"]
        assert cell["n"] == 2 and cell["min"] <= cell["median"] <= cell["max"] <= 1.0
    assert out["autotune_share"] is not None
    md = table({"cases": [out]})
    assert "| sleepy | 1.5 s |" in md and "(worst " in md
    plot({"cases": [out]}, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 1000


def test_sim_budgets_scores_each_method_at_each_budget_and_refreshes_its_block(tmp_path,
                                                                               monkeypatch):
    import benchmarks.sim_budgets as sb

    data = sb.run(2, budgets=(3, 6), noises=(None, 0.1), methods=("intune", "random"),
                  cores=(8,), log=lambda *a: None)
    assert len(data["cells"]) == 2 * 2 * 2
    for c in data["cells"]:
        assert c["n"] == 2 and 0.0 <= c["p10"] <= c["median"] <= 1.0 + 1e-9
        assert c["median_steps_used"] <= c["steps"]
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{sb.START}\nstale\n{sb.END}\nafter\n")
    monkeypatch.setattr(sb, "BENCH_README", readme)
    sb.write_outputs(data, tmp_path, update_readme=True)
    text = readme.read_text()
    assert "stale" not in text and text.startswith("before") and text.endswith("after\n")
    assert "Noise: sigma 0.10" in text and "| 6 |" in text
    assert (tmp_path / "sim_budgets.png").stat().st_size > 1000


def test_policy_compare_scores_a_policy_on_the_selection_split_only(monkeypatch, capsys):
    from benchmarks import policy_compare
    monkeypatch.setattr(policy_compare, "PIPELINES", range(200, 202))
    monkeypatch.setattr(policy_compare, "CORES", (8,))
    monkeypatch.setattr(policy_compare, "STEPS", (3,))
    seen = []
    import intune_flow.sim as sim
    real = sim.sample_pipeline

    def spy(split, index, **kw):
        seen.append((split, index))
        return real(split, index, **kw)

    monkeypatch.setattr(sim, "sample_pipeline", spy)
    assert policy_compare.main(["default"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| default")]
    assert len(rows) == len(policy_compare.PROBES)
    for row in rows:
        median, p10, mean = (float(x) for x in row.strip("|").split("|")[3:6])
        assert 0 < p10 <= median <= 1.0 + 1e-9 and 0 < mean <= 1.0 + 1e-9
    assert {s for s, _ in seen} == {"test"} and {i for _, i in seen} == {200, 201}


def test_sim_bench_out_may_name_a_directory_and_leaves_the_docs_alone(tmp_path):
    import json

    from benchmarks import sim_bench

    from benchmarks import report

    doc, bench_readme = sim_bench.DOC.read_text(), report.BENCH_README.read_text()
    assert sim_bench.main(["--pipelines", "1", "--cores", "8", "--methods", "intune", "random",
                           "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "sim.json").read_text())
    md = (tmp_path / "sim.md").read_text()
    assert data and md.startswith("# Simulated machines") and "| intune |" in md
    assert sim_bench.DOC.read_text() == doc
    assert report.BENCH_README.read_text() == bench_readme


def test_the_docs_show_the_simulated_machines_table_of_the_results():
    from benchmarks import report, sim_bench
    from benchmarks.common import RESULTS

    table = (RESULTS / "sim.md").read_text().split("\n", 1)[1].strip()
    assert table in report.BENCH_README.read_text()
    assert table in sim_bench.DOC.read_text()


def test_a_run_reports_its_noise_from_the_repeats_spread_and_the_hosts_steal():
    from benchmarks import common

    before = {"user": 10.0, "idle": 10.0, "steal": 1.0}
    after = {"user": 19.0, "idle": 19.0, "steal": 3.0}
    assert common.steal_share(before, after) == pytest.approx(2 / 20)
    assert common.steal_share({"user": 1.0}, {"user": 2.0}) is None   # not reported
    assert common.steal_share(before, before) is None                 # no time passed
    assert common.spread({"median": 10.0, "min": 8.0, "max": 11.0}) == pytest.approx(0.3)
    assert common.spread({"median": 0.0, "min": 0.0, "max": 0.0}) is None
    def case(*spreads):      # configs whose repeats spread these shares of a median of 10
        return {"picks": {f"c{i}": {"throughput": {"median": 10.0 if s is not None else 0.0,
                                                    "min": 0.0, "max": 10.0 * (s or 0)}}
                          for i, s in enumerate(spreads)}}

    line = common.noise_sentence({"steal_share": 0.1}, [case(0.1, 0.3), case(None, 0.2)])
    assert "a median of 20% of its median" in line and "10.0% of the machine's CPU time" in line
    assert "steal" not in common.noise_sentence({}, [case(0.1)])      # older runs' JSON
    assert common.noise_sentence({}, [case(None)]) == ""
    assert {"user", "idle"} <= set(common.cpu_times())

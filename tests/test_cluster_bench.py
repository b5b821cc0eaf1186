"""The scale-out benchmark on a tiny case count: its files, its figures and the README blocks."""

import json

import pytest

from benchmarks import cluster_sim


def test_cluster_bench_writes_json_markdown_plot_and_refreshes_marked_blocks(tmp_path):
    data = cluster_sim.run(jobs=2, methods=("demand_match", "fixed_2"), budget_s=900,
                           log=lambda *_: None)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{cluster_sim.START}\nstale\n{cluster_sim.END}\nafter\n")
    cluster_sim.write_outputs(data, tmp_path, readmes=[readme])
    saved = json.loads((tmp_path / "cluster_sim.json").read_text())
    assert saved["meta"]["jobs"] == 2 and len(saved["rows"]) == 4
    assert all(r["ratio"] >= 1 - 1e-9 for r in saved["rows"])     # nothing beats the oracle
    assert (tmp_path / "cluster_sim.png").stat().st_size > 0
    md = (tmp_path / "cluster_sim.md").read_text()
    doc = readme.read_text()
    assert "stale" not in doc and doc.startswith("# x\n\nbefore\n") and doc.endswith("after\n")
    block = cluster_sim.render(saved)
    assert block in doc and block in md
    dm = next(s for s in saved["summary"]["methods"] if s["method"] == "demand_match")
    assert f"| demand_match | {dm['median']:.3f} |" in block


def test_the_paired_summary_compares_the_agent_only_where_the_rule_missed_the_oracle_k():
    def row(job, method, workers, cost):
        return {"job": job, "method": method, "workers": workers, "oracle_workers": 4,
                "ratio": cost, "per_million": cost, "pick_minutes": 1.0, "minutes": 2.0}
    rows = [row(0, "intunex", 4, 1.0), row(0, "demand_match", 4, 1.0),     # same K: left out
            row(1, "intunex", 4, 1.0), row(1, "demand_match", 8, 2.0),
            row(2, "intunex", 5, 1.1), row(2, "demand_match", 2, 1.25)]
    summ = cluster_sim.summarize(rows, ("intunex", "demand_match"))
    (p,) = summ["paired"]
    assert p["n"] == 3 and p["n_differ"] == 2
    assert p["median_agent_over_method_differ"] == pytest.approx((0.5 + 0.88) / 2)
    assert p["agent_cheaper_differ"] == pytest.approx(1 - 0.69)
    agent = summ["methods"][0]
    assert agent["share_oracle_k"] == pytest.approx(2 / 3) and agent["median"] == 1.0

"""The scale-out benchmark on a tiny case count: its files, its figures and the README blocks."""

import json

from benchmarks import cluster_sim


def test_cluster_bench_writes_json_markdown_plot_and_refreshes_marked_blocks(tmp_path):
    data = cluster_sim.run(jobs=2, methods=("intunex", "demand_match", "fixed_2"),
                           budget_s=900, log=lambda *_: None)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{cluster_sim.START}\nstale\n{cluster_sim.END}\nafter\n")
    cluster_sim.write_outputs(data, tmp_path, readmes=[readme])
    saved = json.loads((tmp_path / "cluster_sim.json").read_text())
    assert saved["meta"]["jobs"] == 2 and len(saved["rows"]) == 6
    assert all(r["ratio"] >= 1 - 1e-9 for r in saved["rows"])     # nothing beats the oracle
    assert (tmp_path / "cluster_sim.png").stat().st_size > 0
    md = (tmp_path / "cluster_sim.md").read_text()
    doc = readme.read_text()
    assert "stale" not in doc and doc.startswith("# x\n\nbefore\n") and doc.endswith("after\n")
    block = cluster_sim.render(saved)
    assert block in doc and block in md
    agent = next(s for s in saved["summary"]["methods"] if s["method"] == "intunex")
    assert f"| intunex | {agent['median']:.3f} |" in block
    assert [p["method"] for p in saved["summary"]["paired"]] == ["demand_match", "fixed_2"]

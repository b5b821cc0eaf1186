"""Cold vs warm start through a real S3-compatible store (seaweedfs on loopback).

Each repeat uses a fresh bucket: night 1 tunes cold and writes the record to S3, night 2
starts warm from it. Each night is its own process, as nightly jobs are. Then the two
configs are measured back to back (interleaved) so their throughputs compare like with like.

    .venv/bin/python -m benchmarks.warm_start --repeats 3 --budget-s 60

Writes benchmarks/results/warm_start.json: per repeat and as medians, the warm/cold ratio
of tuning seconds and of delivered throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "examples.criteo:criteo_pipeline"

NIGHT = """
import json, sys
from intune_flow.tune import tune
r = tune(sys.argv[1], budget_s=float(sys.argv[2]), cache=sys.argv[3], progress=False, seed=0)
print("RESULT " + json.dumps({k: v for k, v in r.to_dict().items() if k != "history"}
                             | {"measurements": len(r.history)}))
"""


def night(pipeline: str, budget_s: float, uri: str, env: dict) -> dict:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", NIGHT, pipeline, str(budget_s), uri], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=budget_s * 4 + 300)
    if proc.returncode != 0:
        raise RuntimeError(f"night failed: {proc.stderr[-3000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    out["process_seconds"] = time.perf_counter() - started
    return out


def main(argv=None) -> int:
    from benchmarks.common import RESULTS, interleaved, machine, summary
    from tests.s3server import S3Server

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipeline", default=PIPELINE)
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--probe-repeats", type=int, default=5,
                    help="interleaved throughput probes of each config per repeat")
    ap.add_argument("--window-s", type=float, default=3.0, help="window of those probes")
    ap.add_argument("--out", default=str(RESULTS / "warm_start.json"))
    args = ap.parse_args(argv)

    from intune_flow.pipeline import Pipeline
    from intune_flow.probe import probe

    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the S3 server on kill too
    root = Path(tempfile.mkdtemp(prefix="intune-warm-bench-"))
    server = S3Server(root=root / "s3")
    rows = []
    try:
        server.start()
        env = dict(os.environ, PYTHONPATH=str(ROOT), **server.env(),
                   INTUNE_FLOW_CACHE=str(root / "local-fallback"))
        pipe = Pipeline.load(args.pipeline)
        for rep in range(args.repeats):
            uri = f"s3://{server.make_bucket()}/intune"
            cold = night(args.pipeline, args.budget_s, uri, env)
            warm = night(args.pipeline, args.budget_s, uri, env)
            print(f"repeat {rep + 1}: cold {cold['source']} {cold['tuning_seconds']:.1f}s, "
                  f"warm {warm['source']} {warm['tuning_seconds']:.2f}s"
                  + (f" ({warm['reason']})" if warm.get("reason") else ""), flush=True)
            runs = interleaved(lambda c: probe(pipe, c, window_s=args.window_s, warmup_s=0.5),
                               {"cold": cold["config"], "warm": warm["config"]},
                               args.probe_repeats)
            tp = {k: summary([m["throughput"] for m in v])["median"] for k, v in runs.items()}
            pairs = [w["throughput"] / c["throughput"]
                     for c, w in zip(runs["cold"], runs["warm"]) if c["throughput"] > 0]
            rows.append({
                "cold": cold, "warm": warm, "throughput_cold": tp["cold"],
                "throughput_warm": tp["warm"],
                "tuning_ratio": warm["tuning_seconds"] / cold["tuning_seconds"],
                "throughput_ratio": tp["warm"] / tp["cold"] if tp["cold"] else 0.0,
                "paired_throughput_ratio": summary(pairs)["median"],
                "same_config": cold["config"] == warm["config"],
                "load_average": os.getloadavg(), "probes": runs})
            print(f"  tuning ratio {rows[-1]['tuning_ratio']:.3f}, throughput ratio "
                  f"{rows[-1]['throughput_ratio']:.3f}", flush=True)
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "benchmark": "warm_start", "pipeline": args.pipeline, "budget_s": args.budget_s,
        "store": "seaweedfs (weed mini) on loopback, s3:// URI, one fresh bucket per repeat",
        "command": "python -m benchmarks.warm_start " + " ".join(argv or sys.argv[1:]),
        "machine": machine(),
        "medians": {
            "cold_tuning_seconds": summary([r["cold"]["tuning_seconds"] for r in rows]),
            "warm_tuning_seconds": summary([r["warm"]["tuning_seconds"] for r in rows]),
            "tuning_ratio": summary([r["tuning_ratio"] for r in rows]),
            "throughput_ratio": summary([r["throughput_ratio"] for r in rows]),
            "paired_throughput_ratio": summary([r["paired_throughput_ratio"] for r in rows]),
            "same_config": [r["same_config"] for r in rows],
            "warm_sources": [r["warm"]["source"] for r in rows],
            "cache_hit_share": (sum(r["warm"]["source"] == "cache" for r in rows) / len(rows)
                                if rows else 0.0),
        },
        "repeats": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    med = report["medians"]
    print(f"median tuning ratio {med['tuning_ratio']['median']:.3f} "
          f"(cold {med['cold_tuning_seconds']['median']:.1f}s, warm "
          f"{med['warm_tuning_seconds']['median']:.2f}s), median throughput ratio "
          f"{med['throughput_ratio']['median']:.3f}; warm sources {med['warm_sources']} "
          f"(cache hits {med['cache_hit_share']:.0%}) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

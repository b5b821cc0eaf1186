"""Training-level effect: the small DLRM's steps/s and input wait, AUTOTUNE config vs. intune config."""

from __future__ import annotations

from .common import interleaved, summary


def run(picks_by_case: dict, *, steps: int, repeats: int, log=print) -> dict:
    """``picks_by_case``: case name -> {"ref", "kwargs", "autotune": cfg, "intune": cfg}."""
    from examples.dlrm import train
    from intune_flow.pipeline import Pipeline

    out = {}
    for case, p in picks_by_case.items():
        pipe = Pipeline.load(p["ref"], **p.get("kwargs", {}))

        class _Stats:  # adapts TrainStats to the interleaved() measurement protocol
            def __init__(self, stats):
                self.stats = stats
                self.throughput = stats.steps_per_s
                self.peak_rss = 0
                self.status = "ok"

            def to_dict(self):
                return self.stats.to_dict()

        def measure(config):
            return _Stats(train(pipe.build(config), steps=steps))

        log(f"[training {case}] {steps} DLRM steps per run")
        runs = interleaved(measure, {"autotune": p["autotune"], "intune": p["intune"]}, repeats,
                           log=log, unit="steps/s")
        out[case] = {name: {"steps_per_s": summary([r["steps_per_s"] for r in rs]),
                            "input_wait_fraction": summary([r["input_wait_fraction"] for r in rs]),
                            "config": p[name]}
                     for name, rs in runs.items()}
    return out

"""The nightly retraining flow: tune the input pipeline with @intune, then train a small DLRM.

    python flows/nightly_retrain.py run                       # night 1: tunes (cold cache)
    python flows/nightly_retrain.py run                       # night 2: cache hit, no tuning
    python flows/nightly_retrain.py run --tune_budget_s 10 --train_steps 100

Steps: ``start`` -> ``prepare`` (generated Criteo-shaped TFRecord shards, reused when
present) -> ``train`` (``@intune`` tunes ``examples.criteo:criteo_pipeline`` on this
machine, then ``examples.dlrm.train`` runs a bounded number of steps on the tuned
dataset) -> ``end`` (prints training steps/s, input-wait fraction, tuning seconds and
source, seconds saved; the same figures are the ``summary`` artifact). The tuning
details are the ``intune_result`` artifact and the ``intune`` card of the ``train`` step:
``python flows/nightly_retrain.py card view train --id intune``.
"""

import torch  # noqa: F401  (import torch before metaflow: Netflix/metaflow#2462)
from metaflow import FlowSpec, Parameter, current, step

from intune_flow.metaflow import intune

PIPELINE = "examples.criteo:criteo_pipeline"


class NightlyRetrainFlow(FlowSpec):
    """Nightly DLRM retraining whose input pipeline is tuned (or fetched from the cache) first."""

    tune_budget_s = Parameter("tune_budget_s", type=float, default=30.0,
                              help="Seconds the tuning phase may spend when the cache has no answer")
    train_steps = Parameter("train_steps", type=int, default=200,
                            help="Training steps (batches) of the DLRM")
    batch_size = Parameter("batch_size", type=int, default=1024, help="Records per batch")
    workers = Parameter("workers", type=str, default="",
                        help='Scale out onto tf.data service workers, e.g. "local:2x1" '
                             "(default: train on this node only)")

    @step
    def start(self):
        self.pipeline = PIPELINE
        self.next(self.prepare)

    @step
    def prepare(self):
        """Generated Criteo-shaped shards in $INTUNE_FLOW_DATA_DIR, written once and reused."""
        from intune_flow.data import default_dataset

        self.files = default_dataset("tfrecord")
        print(f"training data: {len(self.files)} TFRecord shards under "
              f"{self.files[0].rsplit('/', 2)[0]}")
        self.next(self.train)

    @intune(pipeline=PIPELINE, budget_s=tune_budget_s, workers=workers,
            pipeline_kwargs=lambda flow: {"files": flow.files, "batch_size": flow.batch_size})
    @step
    def train(self):
        from examples.dlrm import train

        stats = train(current.intune.dataset(), steps=self.train_steps, seed=0)
        self.train_stats = stats.to_dict()
        print(f"trained {stats.steps} steps: {stats.steps_per_s:.1f} steps/s, input wait "
              f"{stats.input_wait_fraction:.1%} of step time, loss {stats.first_loss:.3f} -> "
              f"{stats.final_loss:.3f}")
        self.next(self.end)

    @step
    def end(self):
        from intune_flow.metaflow.summary import format_summary, summarize

        self.summary = summarize(self.intune_result, self.train_stats)
        print(format_summary(self.summary))


if __name__ == "__main__":
    NightlyRetrainFlow()

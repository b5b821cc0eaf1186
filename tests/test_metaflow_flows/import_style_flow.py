"""A flow written from the README: ``from metaflow import intune`` on a pipeline of our own."""

import json

from metaflow import FlowSpec, current, intune, step


class ImportStyleFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train)

    @intune(pipeline="tiny_pipelines:tiny_pipeline", budget_s=6, window_s=0.5, method="hillclimb")
    @step
    def train(self):
        batches = current.intune.dataset(batch_size=32)
        first = next(iter(batches))
        self.first_batch_len = int(first.shape[0])
        self.seen = {"source": current.intune.source, "config": current.intune.config}
        print("SEEN " + json.dumps(self.seen))
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    ImportStyleFlow()

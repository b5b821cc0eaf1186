"""A flow whose @intune misspells an attribute (``budget`` for ``budget_s``) in its source."""

from metaflow import FlowSpec, intune, step


class MisspelledFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train)

    @intune(pipeline="tiny_pipelines:tiny_pipeline", budget=5)
    @step
    def train(self):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    MisspelledFlow()

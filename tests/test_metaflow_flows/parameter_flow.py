"""A step whose @intune budget is a flow Parameter: `run --budget 0` is wrong on the command
line, and the message must say so."""

from metaflow import FlowSpec, Parameter, intune, step


class ParameterFlow(FlowSpec):
    budget = Parameter("budget", default=2)

    @step
    def start(self):
        self.next(self.train)

    @intune(pipeline="tiny_pipelines:tiny_pipeline", budget_s=budget)
    @step
    def train(self):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    ParameterFlow()

"""A step with @retry whose @intune pipeline cannot be imported on the task: a configuration
error, which a retry would only repeat."""

from metaflow import FlowSpec, intune, retry, step


class RetryFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train)

    @retry(times=2, minutes_between_retries=0)
    @intune(pipeline="worker_only_pipelines:pipeline", budget_s=2)
    @step
    def train(self):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    RetryFlow()

"""A flow whose pipeline breaks while tuning: the step must still run, or with strict fail as
the step's own exception (which @catch then catches, as it would any step failure)."""

from metaflow import FlowSpec, Parameter, catch, current, intune, step


class FallbackFlow(FlowSpec):
    strict = Parameter("strict", type=bool, default=False, help="fail the step if tuning fails")
    budget = Parameter("budget", default=2, help="budget_s; 0 is refused on the task")

    @step
    def start(self):
        self.next(self.train)

    @catch(var="failure", print_exception=True)
    @intune(pipeline="tiny_pipelines:broken_pipeline", budget_s=budget, window_s=0.3,
            strict=strict)
    @step
    def train(self):
        self.step_ran_with = {"source": current.intune.source, "config": current.intune.config,
                              "reason": current.intune.reason}
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    FallbackFlow()

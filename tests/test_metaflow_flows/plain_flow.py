"""A flow with no @intune at all: the tests attach it with ``--with intune:...``."""

import json
import os

from metaflow import FlowSpec, current, step


class PlainFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train)

    @step
    def train(self):
        session = current.get("intune")
        self.seen = None if session is None else {"source": session.source,
                                                   "config": session.config,
                                                   "strict": session.settings.strict}
        print("SEEN " + json.dumps(self.seen))
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    PlainFlow()

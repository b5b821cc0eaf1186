"""What one measurement of one config reports: the currency of the tuner, baselines and benchmarks."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

STATUS_OK = "ok"
STATUS_OOM = "oom"          # RSS passed the RAM budget; the window was cut short
STATUS_ERROR = "error"      # the pipeline raised while building or iterating
STATUS_TIMEOUT = "timeout"  # no element arrived within the step timeout
STATUS_EMPTY = "empty"      # the pipeline ended before the window could be measured


@dataclass
class Measurement:
    """Throughput and resource use of one config over one measurement window.

    ``throughput`` is records/s when the batch size is known, else elements/s:
    the one number the tuner maximizes.
    """

    config: dict[str, int]
    throughput: float = 0.0
    elements_per_s: float = 0.0
    records_per_s: float = 0.0
    spread: float = 0.0             # (max - min) / median over sub-windows
    cpu_util: float = 0.0           # process CPU seconds / (wall seconds * cpu budget)
    machine_busy: float | None = None  # 1 - idle cores / cpu budget (None: not known)
    peak_rss: int = 0               # bytes, peak over the window
    seconds: float = 0.0            # wall (or simulated) seconds this measurement cost
    status: str = STATUS_OK
    error: str | None = None
    stage_signals: dict[str, float] = field(default_factory=dict)  # per-knob, 0..1 where known
    autotune_choices: dict[str, int] = field(default_factory=dict)  # what AUTOTUNE knobs held
    same_as: dict[str, int] | None = None  # not measured: builds what this config measured did

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @property
    def cpu_busy(self) -> float:
        """How much of the CPU budget was not idle: this process's share, or more where
        other processes (or the hypervisor's steal) left it fewer idle cores than that.
        What the tuner reads when a move did not pay and it asks whether the CPU had room
        (none: no capacity; some: contention, or a stage the signals miss)."""
        return max(self.cpu_util, self.machine_busy or 0.0)

    @property
    def others_busy(self) -> float:
        """The share of the CPU budget other processes (or the hypervisor's steal) kept
        busy: how far ``machine_busy`` passes this process's ``cpu_util`` (0 where unknown)."""
        if self.machine_busy is None:
            return 0.0
        return max(0.0, self.machine_busy - self.cpu_util)

    @property
    def own_share(self) -> float:
        """This process's ``cpu_util`` as a share of the CPU budget other processes left it
        (``cpu_util`` where they left all of it, or it is not known): on a CPU others hold a
        quarter of, a pipeline that keeps the rest busy is CPU-bound, not waiting."""
        free = 1.0 - self.others_busy
        return min(1.0, self.cpu_util / free) if free > 0 else 1.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Measurement":
        fields = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in fields})

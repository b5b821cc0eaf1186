"""Hand-made cluster jobs for the scale-out tests: rates that can be worked out by hand."""

from intune_flow.knobs import AUTOTUNE, Knob, KnobSpace
from intune_flow.scaleout.cost import CostModel
from intune_flow.sim import Buffer, SimPipeline, Stage
from intune_flow.sim.cluster import ClusterJob, NodeClass

GIB = 2**30


def line_pipeline(cpu=8e-5, cores=8, par_max=16):
    """One parallel stage and a prefetch buffer: ``cores / cpu`` records/s at parallelism >= cores
    (1e5 by default)."""
    return SimPipeline(stages=(Stage("read", cpu, 0.0, 1.0, 1e3, "read"),),
                       buffers=(Buffer("prefetch", 0, 1e3, 0.0),),
                       space=KnobSpace((Knob("read", "parallelism", 1, par_max, AUTOTUNE),
                                        Knob("prefetch", "buffer", 1, 16, AUTOTUNE))),
                       cores=cores, ram_total=64 * GIB, ram_budget=32 * GIB, base_mem=GIB,
                       contention=0.0, noise=0.001)


def job_of(prefix, demand=4e5, **kw):
    args = dict(prefix=prefix, worker=NodeClass("w", prefix.cores, prefix.ram_total, 1e12),
                trainer=NodeClass("t", 8, 64 * GIB, 1e12), demand=demand, suffix_cpu=1e-9,
                rpc_cpu=1e-9, record_bytes=100.0, coordination=0.0, startup_s=30.0,
                noise=0.001, cost=CostModel(4.0, 0.4), max_workers=16)
    args.update(kw)
    return ClusterJob(**args)

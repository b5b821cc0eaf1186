"""Workers as Ray actors, on an existing Ray cluster or a local one the pool starts."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from ...errors import WorkerPoolError
from .base import WorkerInfo, WorkerPool

log = logging.getLogger("intune_flow.scaleout")

RAY_MISSING = ("Ray is not installed, and the 'ray' worker pool needs it. Fix: "
               "pip install 'intune-flow[ray]' (or use a local pool: workers='local:4').")


#: The longest base for a local Ray's temp dir: Ray's socket paths under it (a session
#: directory and ``sockets/plasma_store``) must stay below 107 characters.
RAY_TEMP_BASE_MAX = 32


def ray_temp_base() -> str:
    """Where a local Ray's temp dir goes: ``RAY_TMPDIR`` (Ray's own variable) when set and
    short enough for Ray's socket paths, else ``/tmp`` (with a warning naming the limit)."""
    base = os.environ.get("RAY_TMPDIR")
    if not base:
        return "/tmp"
    base = os.path.abspath(base)
    if len(base) > RAY_TEMP_BASE_MAX:
        log.warning("RAY_TMPDIR=%s is longer than %d characters, too long for Ray's socket "
                    "paths under it; the local Ray's temp dir goes under /tmp (removed when "
                    "the pool stops)", base, RAY_TEMP_BASE_MAX)
        return "/tmp"
    os.makedirs(base, exist_ok=True)
    return base


def import_ray():
    try:
        import ray
    except ImportError as exc:
        raise WorkerPoolError(RAY_MISSING) from exc
    return ray


_ACTOR_CLASS = None


def _actor_class(ray):
    """The actor class, made remote once Ray is imported (a module-level ``@ray.remote``
    would make importing this module need Ray); each actor sets its CPUs with ``options``."""
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        class TFDataWorker:
            """Holds one tf.data service ``WorkerServer`` inside a Ray worker process."""

            def __init__(self):
                self._server = None

            def start(self, dispatcher_address: str, heartbeat_ms: int) -> dict:
                os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
                import ray as _ray
                import tensorflow as tf

                host = _ray.util.get_node_ip_address()
                service = tf.data.experimental.service
                self._server = service.WorkerServer(service.WorkerConfig(
                    dispatcher_address=dispatcher_address, worker_address=f"{host}:%port%",
                    port=0, heartbeat_interval_ms=heartbeat_ms))
                port = int(self._server._address.rsplit(":", 1)[1])
                return {"pid": os.getpid(), "address": f"{host}:{port}", "node": host}

            def ping(self) -> int:
                return os.getpid()

        _ACTOR_CLASS = ray.remote(TFDataWorker)
    return _ACTOR_CLASS


class RayPool(WorkerPool):
    """``WorkerServer``s as Ray actors, each reserving ``num_cpus_per_worker`` CPUs (and
    ``memory=ram_per_worker`` bytes when stated, so Ray places it where that much is free).

    ``address=None`` starts a local Ray (``ray.init(num_cpus=..., include_dashboard=False)``
    with usage stats off and a temp dir the pool owns and removes); ``address="auto"``,
    ``"ray://host:10001"`` or ``"host:6379"`` connects to an existing cluster (a Ray already
    initialized in this process is used as is). ``stop`` kills every actor it created and
    shuts Ray down only if the pool started it. Workers on other nodes must reach the
    dispatcher: on a real cluster the pool advertises this node's IP (or pass
    ``dispatcher_address=``)."""

    kind = "ray"
    STARTUP_GUESS_S = 15.0   # an actor's worker process, then the TensorFlow import in it

    def __init__(self, address: str | None = None, num_cpus_per_worker: int = 1,
                 max_workers: int = 1, *, num_cpus: int | None = None, **kwargs):
        super().__init__(max_workers, cores_per_worker=num_cpus_per_worker, **kwargs)
        self.address = address
        self.num_cpus = num_cpus
        self._ray = None
        self._owns_ray = False
        self._temp_dir: str | None = None

    @property
    def num_cpus_per_worker(self) -> int:
        return self.cores_per_worker

    def _open_engine(self) -> None:
        ray = import_ray()
        self._ray = ray
        if ray.is_initialized():
            return
        if self.address is None:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            self._temp_dir = tempfile.mkdtemp(prefix="ray", dir=ray_temp_base())
            cpus = self.num_cpus or max(os.cpu_count() or 1,
                                        self.max_workers * self.cores_per_worker)
            try:
                self._start_local_ray(ray, cpus)
            except BaseException:
                shutil.rmtree(self._temp_dir, ignore_errors=True)
                self._temp_dir = None
                raise
            self._owns_ray = True
            return
        try:
            ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, grpc errors
            # A failed ray:// connect leaves Ray's client mode on for the whole process, and a
            # local Ray started later in it would then fail: shut that state down.
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001 - best effort; the connect error is the news
                pass
            raise WorkerPoolError(
                f"could not connect to the Ray cluster at address={self.address!r}: "
                f"{type(exc).__name__}: {str(exc).strip()[:300]}. Fix: check that the cluster "
                "is up and reachable from here (`ray status --address ...`), or give "
                "workers=\"ray:N\" (no address) to start a local Ray on this machine.") from exc
        self._owns_ray = True   # this pool connected: it disconnects

    def _start_local_ray(self, ray, cpus: int, attempts: int = 2) -> None:
        # Ray gives its raylet a fixed 30 s to register; a machine busy with other work can
        # miss that once, so a timed-out start is shut down (its processes with it) and retried.
        for attempt in range(1, attempts + 1):
            try:
                ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=self._temp_dir,
                         logging_level="ERROR", log_to_driver=False, configure_logging=True)
                return
            except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
                ray.shutdown()
                if attempt == attempts or "timed out during startup" not in str(exc):
                    raise
                log.warning("the local Ray did not start within Ray's 30 s (%s); starting it "
                            "again (attempt %d of %d)", exc, attempt + 1, attempts)

    def _close_engine(self) -> None:
        ray, self._ray = self._ray, None
        if ray is not None and self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def _dispatcher_host(self) -> str:
        if self.address is None:
            return "127.0.0.1"
        return self._ray.util.get_node_ip_address()

    def _launch(self, info: WorkerInfo) -> None:
        ray = self._ray
        reserve = {"memory": self.ram_per_worker} if self.ram_per_worker else {}
        actor = _actor_class(ray).options(num_cpus=self.cores_per_worker, max_restarts=0,
                                          **reserve).remote()
        info.cores = self.cores_per_worker
        info.handle = {"actor": actor,
                       "ref": actor.start.remote(self.dispatcher_address, self.heartbeat_ms)}

    def _ready(self, info: WorkerInfo) -> bool:
        ray = self._ray
        done, _ = ray.wait([info.handle["ref"]], timeout=0)
        if not done:
            return False
        try:
            data = ray.get(done[0])
        except Exception as exc:  # noqa: BLE001 - the actor died or start raised
            raise WorkerPoolError(
                f"Ray worker {info.index} failed before it registered with the dispatcher at "
                f"{self.dispatcher_address}: {type(exc).__name__}: {str(exc).strip()[:400]}. "
                "Fix: check that TensorFlow is installed on the Ray nodes (the same version "
                "as here) and that they reach the dispatcher.") from exc
        info.pid, info.address, info.node = data["pid"], data["address"], data["node"]
        return True

    def _alive(self, info: WorkerInfo) -> bool:
        ray = self._ray
        if ray is None or info.handle is None:
            return False
        ref = info.handle["actor"].ping.remote()
        done, _ = ray.wait([ref], timeout=5)
        if not done:
            return False
        try:
            ray.get(done[0])
            return True
        except Exception:  # noqa: BLE001 - RayActorError: it died
            return False

    def worker_rss(self) -> int | None:
        """On a local Ray the actors' processes are here; on a cluster, None."""
        return self._local_rss() if self.address is None else None

    def _terminate(self, workers: list[WorkerInfo]) -> None:
        ray = self._ray
        if ray is None or not ray.is_initialized():
            return
        for info in workers:
            if info.handle is not None:
                try:
                    ray.kill(info.handle["actor"], no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass

    def _capacity_hint(self) -> str:
        try:
            free = self._ray.available_resources().get("CPU", 0)
        except Exception:  # noqa: BLE001
            return ""
        return (f" (each Ray worker reserves num_cpus={self.cores_per_worker}; the cluster has "
                f"{free:g} CPUs free)")

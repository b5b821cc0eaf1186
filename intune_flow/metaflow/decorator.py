"""``@intune``: a Metaflow step decorator that tunes the step's input pipeline before the step runs.

Hooks (see ``metaflow.decorators.StepDecorator``):

- ``step_init`` (flow build, in the runtime and again in each task process): validate and
  coerce the attributes, read ``@resources`` budgets, pick the cache, attach the
  ``@card(id="intune")`` that shows the tuning.
- ``task_pre_step`` (on the machine that runs the step): expose ``current.intune`` and,
  for a decorator written on the step, run ``intune_flow.tune`` now and save the record
  as the ``intune_result`` artifact. One attached with ``--with`` sits on every step, so
  it tunes only when the step first uses ``current.intune``.
- ``task_decorate``: just before the step body, fill the card (``current.card`` is only
  ready once every card decorator has run its ``task_pre_step``).

A tuning failure never breaks the step unless ``strict=True``: ``tune()`` falls back to
the cached config or the factory defaults and says why; this module only shows it (log,
card, artifact). A configuration error (``ConfigurationError``) stops the step with its
message; ``strict=True`` lets ``TuningError`` through.
"""

from __future__ import annotations

import functools
import sys

from metaflow.decorators import UNPACK_KEY, StepDecorator, _base_step_decorator
from metaflow.exception import MetaflowException

from ..errors import ConfigurationError
from ..options import TuneOptions
from . import card as intune_card
from .attributes import (DEFAULTS, WHERE, build_time_values, deferred, parameter_note, parse,
                         resolve)
from .defaults import datastore_s3_client, default_cache, resource_budgets
from .session import IntuneSession

ARTIFACT = "intune_result"
NOT_RETRIED = " (a configuration error: not retried)"


class IntuneDecoratorException(MetaflowException):
    headline = "@intune error"


def _log(message: str) -> None:
    print(f"[@intune] {message}", flush=True)


def _within_machine(attribute, given, from_resources, machine, describe):
    """``given`` (else ``from_resources``), lowered to ``machine()`` with a log line; None if
    neither is set."""
    asked, by = (given, attribute) if given is not None else (from_resources, "@resources")
    if asked is None:
        return None
    limit = machine()
    if asked > limit:
        _log(f"{by} asks for {describe(asked)} but this machine gives the step "
             f"{describe(limit)}: tuning within that")
        return limit
    return asked


class IntuneDecorator(StepDecorator):
    """Tune the step's input pipeline on the machine that runs the step.

    Attributes: ``pipeline`` ("module:factory", required), ``budget_s`` (60), ``cache``
    (URI/path; default: ``$INTUNE_FLOW_CACHE``, else under the S3 datastore root, else the
    local default), ``cpu_budget``/``ram_budget`` (default: the step's ``@resources``),
    ``strict`` (False), ``method`` ("intune"), ``window_s``, ``timeout_s`` (seconds a probe
    or the factory's first build may hang before it is abandoned; default: tune()'s),
    ``pipeline_kwargs`` (dict), ``workers`` (``"local:4x1"``, ``"ray:32x4"``: scale out onto
    tf.data service workers; ``current.intune.dataset()`` then starts them and they stop
    after the step).
    """

    name = "intune"
    defaults = dict(DEFAULTS)

    def __init__(self, attributes=None, *args, **kwargs):
        # Metaflow's own refusal lists the attributes but names no near miss (budget -> budget_s).
        # Raised here, as the flow's class is defined, it would be a bare traceback: it waits
        # for step_init, where Metaflow prints it as a message.
        self._refused = None
        try:
            given = [k for k in attributes or {} if not k.startswith(UNPACK_KEY)]
            TuneOptions.refuse_unknown(given, surface="metaflow", where=WHERE)
        except ConfigurationError as exc:
            self._refused = str(exc)
            attributes = {k: v for k, v in attributes.items()
                          if k in self.defaults or k.startswith(UNPACK_KEY)}
        super().__init__(attributes, *args, **kwargs)

    def step_init(self, flow, graph, step_name, decorators, environment, flow_datastore, logger):
        self.step_name = step_name
        if self._refused:
            raise IntuneDecoratorException(f"{self._where}: {self._refused}")
        self.settings: TuneOptions = self._parse(build_time_values(self.attributes))
        self.resource_cpu, self.resource_ram = resource_budgets(decorators)
        self.datastore_type = getattr(flow_datastore, "TYPE", None)
        self.session: IntuneSession | None = None
        self._attach_card(flow, step_name, decorators)

    @property
    def _where(self) -> str:
        return f"step {self.step_name!r}" if self.statically_defined else "--with intune"

    def _parse(self, attributes) -> TuneOptions:
        try:
            return parse(attributes)
        except ConfigurationError as exc:
            raise IntuneDecoratorException(
                f"{self._where}: {exc}{parameter_note(self.attributes, attributes)}") from None

    # -- card ----------------------------------------------------------------------------
    def _attach_card(self, flow, step_name, decorators) -> None:
        """Add ``@card(type="blank", id="intune")`` to the step unless it is there already."""
        from metaflow import decorators as mf_decorators

        for deco in decorators:
            if deco.name == "card" and deco.attributes.get("id") == intune_card.CARD_ID:
                return
        step = next((s for s in flow if s.name == step_name), None)
        if step is None:
            return
        mf_decorators._attach_decorators_to_step(
            step, [f"card:type={intune_card.CARD_TYPE},id={intune_card.CARD_ID}"])
        added = step.decorators[-1]
        added.external_init()
        # If the step's own @card already ran step_init, it counted the cards on the step
        # without ours; the count decides when current.card is finalized.
        from metaflow.plugins.cards.card_decorator import CardDecorator

        if step_name in CardDecorator.total_decos_on_step:
            CardDecorator._set_card_counts_per_step(
                step_name, sum(isinstance(d, CardDecorator) for d in step.decorators))

    # -- task ------------------------------------------------------------------------------
    def task_pre_step(self, step_name, task_datastore, metadata, run_id, task_id, flow, graph,
                      retry_count, max_user_code_retries, ubf_context, inputs):
        self._flow = flow
        self._in_body = False
        self._failure = None
        self._final: Exception | None = None
        self.session = None
        try:
            self._pre_step(flow)
        except Exception as exc:  # noqa: BLE001 - raised in the step instead, see task_decorate
            # Raising here would cut the other decorators' task_pre_step short (the intune
            # card's among them), so @catch would crash on a half-set-up card and Metaflow
            # would call a strict failure an internal error. Raised as the step's first act,
            # it is the step's exception: @catch catches it and @retry sees it as usual.
            self._failure = exc

    def _pre_step(self, flow) -> None:
        from metaflow import current

        if deferred(self.attributes):  # Parameters and callables: this run's values
            try:
                values = resolve(self.attributes, flow)
            except ConfigurationError as exc:
                raise IntuneDecoratorException(f"{self._where}: {exc}") from exc
            self.settings = self._parse(values)
        cpu, ram = self._budgets()
        cache, origin = ((self.settings.cache, "decorator") if self.settings.cache is not None
                         else default_cache(self.datastore_type))
        self.session = IntuneSession(
            self.settings, functools.partial(self._tune, cpu, ram, cache),
            on_tuned=self._record, cpu_budget=cpu, cache=cache, cache_origin=origin)
        current._update_env({"intune": self.session})
        if self.statically_defined:
            self.session.ensure_tuned()  # on this machine, before the step body
        # else: attached with --with to every step; tune when the step first uses it

    def task_decorate(self, step_func, flow, graph, retry_count, max_user_code_retries, ubf_context):
        deco = self

        @functools.wraps(step_func)
        def step_with_card(*args, **kwargs):
            deco._in_body = True  # current.card is ready from here on
            if deco._failure is not None:
                failure, deco._failure = deco._failure, None
                if _is_configuration_error(failure):
                    deco._final = failure
                intune_card.add_note(f"@intune failed before the step ran: {failure}"
                                     + (NOT_RETRIED if deco._final is not None else ""),
                                     logger=_log)
                raise failure
            if deco.session is not None and deco.session.tuned:
                intune_card.add_to_card(getattr(flow, ARTIFACT), logger=_log)
            return step_func(*args, **kwargs)

        return step_with_card

    def _record(self, session: IntuneSession) -> None:
        """After tuning: the artifact now; the card now if the body runs, else just before it."""
        record = session.to_dict()
        setattr(self._flow, ARTIFACT, record)
        if self._in_body:
            intune_card.add_to_card(record, logger=_log)

    def task_post_step(self, step_name, flow, graph, retry_count, max_user_code_retries):
        if self.session is not None and not self.session.tuned:
            intune_card.add_note(
                "@intune was attached to this step but the step never used `current.intune`, "
                "so nothing was tuned.", logger=_log)
        self._close()

    def task_exception(self, exception, step_name, flow, graph, retry_count, max_user_code_retries):
        self._close()

    def _close(self) -> None:
        """The step ended: stop the workers current.intune.dataset() started."""
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def task_finished(self, step_name, flow, graph, is_task_ok, retry_count,
                      max_user_code_retries):
        """After a configuration error, end the task with Metaflow's "do not retry" exit code
        (its runtime then skips ``@retry``): a retry would only repeat the error. Runs once
        the attempt's data and metadata are persisted, so the failure is recorded as usual."""
        final, self._final = self._final, None
        if final is None or is_task_ok:
            return
        from metaflow.exception import METAFLOW_EXIT_DISALLOW_RETRY

        _log(f"{type(final).__name__}: {final}{NOT_RETRIED}")
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(METAFLOW_EXIT_DISALLOW_RETRY)

    def _budgets(self) -> tuple[float | None, int | None]:
        """The attribute, else ``@resources``, lowered to what this machine gives the step:
        both describe the machine the step is meant for, run locally (or on a smaller
        machine) the step may get less, and tune() refuses more than there is."""
        from ..resources import machine_ram, usable_cpus

        s = self.settings
        cpu = _within_machine("cpu_budget", s.cpu_budget, self.resource_cpu, usable_cpus,
                              lambda v: f"{v:g} CPUs")
        ram = _within_machine("ram_budget", s.ram_budget, self.resource_ram, machine_ram,
                              lambda v: f"{v / 2**30:.1f} GiB of memory")
        return cpu, ram

    def _tune(self, cpu, ram, cache):
        """Run ``intune_flow.tune`` on this machine; a configuration error stops the step."""
        from ..cache import default_cache_uri
        from ..tune import tune

        s = self.settings
        _log(f"tuning {s.pipeline_name} (budget {s.budget_s:g} s, method {s.method}, "
             f"cpu budget {cpu if cpu is not None else 'auto'}, "
             f"cache {cache or default_cache_uri()})")
        try:
            result = tune(s.pipeline, **{**s.tune_kwargs(), "cpu_budget": cpu,
                                         "ram_budget": ram, "cache": cache,
                                         "s3_client": datastore_s3_client(cache),
                                         "progress": _progress})
        except ConfigurationError as exc:
            # There is no config to fall back to: fail the step saying what to fix.
            raise IntuneDecoratorException(f"step {self.step_name!r}: {exc}") from exc
        _report(result)
        return result


def _is_configuration_error(exc: BaseException) -> bool:
    """What a retry cannot fix: this decorator raises IntuneDecoratorException only for
    configuration errors (a strict tuning failure is a TuningError, and is retried)."""
    return isinstance(exc, (ConfigurationError, IntuneDecoratorException))


def _progress(event: dict) -> None:
    from ..progress import format_event

    _log(format_event(event))


def _report(r) -> None:
    line = (f"source {r.source}: config {dict(r.config) or 'the factory defaults'} after "
            f"{r.tuning_seconds:.1f} s, " +
            (f"{_num(r.throughput)} records/s" if r.throughput else "nothing measured"))
    if r.start_throughput:
        line += f" (start config {_num(r.start_throughput)}/s)"
    if r.seconds_saved:
        line += f", {r.seconds_saved:.1f} s saved"
    _log(line)
    if r.reason and r.source != "fallback":   # tune() has logged why it fell back
        _log("note: " + r.reason)
    if r.warnings:   # tune() logged each where it arose: point at them, do not repeat them
        # On stderr, which Metaflow's log can show after this stdout line (README-only
        # trial 80 read "logged above" with the warnings still to come).
        _log(f"{len(r.warnings)} warning(s) from tune() on stderr (Metaflow may show them "
             "after this line); also in current.intune.result.warnings and on the card")


def _num(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def intune(*args, **kwargs):
    """Step decorator: tune the input pipeline of this step before it runs.

    ``@intune(pipeline="package.module:factory", budget_s=60, cache=None, cpu_budget=None,
    ram_budget=None, strict=False, method="intune", window_s=None, timeout_s=None,
    pipeline_kwargs=None, workers=None)``
    above ``@step``; inside the step ``current.intune.dataset()`` is the tuned dataset.
    """
    return _base_step_decorator(IntuneDecorator, *args, **kwargs)

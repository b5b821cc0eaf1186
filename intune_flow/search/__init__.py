"""``run_search``: every tuning method behind one env interface and one budget."""

from __future__ import annotations

import numpy as np

from ..env import has_native_autotune
from ..measurement import STATUS_EMPTY, STATUS_ERROR
from .baselines import BASELINES, RULES
from .intune import VARIANTS, intune, load_policy
from .tracker import BudgetSpent, SearchOutcome, Tracker

METHODS = ("intune", *BASELINES)
SEARCHING = tuple(name for name in METHODS if BASELINES.get(name) not in RULES)
"""The methods that search (the others measure one rule-picked config)."""


def run_search(env, method: str = "intune", *, start=None, budget_s: float = 60.0,
               max_steps: int | None = None, policy_state=None, seed=None, progress=None,
               continuous: bool = False, learn: bool = True,
               variant: str = "shipped", known=()) -> SearchOutcome:
    """Search ``env`` for the best config with ``method`` within ``budget_s`` (env clock seconds).

    The start config (default: the knobs' defaults, AUTOTUNE resolved to the CPU
    budget; a start given keeps its AUTOTUNE values where the framework has its own
    tuner, as a cached hybrid config does) is measured first; the outcome's ``best``
    is the best measured config and never worse than the start. A config that OOMs, errors
    or times out is abandoned and penalized; a start that reads the pipeline empty ends the
    search (stopped ``"error"``): no config changes what the data holds; so does a start at
    the defaults whose pipeline raises (a corrupt record): the error is the pipeline's,
    and the defaults are what a fallback would train on. ``max_steps`` caps
    measurements after the start. ``continuous=True`` (intune) keeps tuning until the budget is spent
    and re-allocates when ``env.cpu_budget`` changes. ``extra`` holds the method's notes
    (``autotune_rounds``; intune's ``final_cores``, ``rebased_at``, ``chosen_by``,
    ``best_mean``, ``best_looks``: see :class:`~intune_flow.search.tracker.Tracker`).
    ``variant`` switches parts of intune off for ablations
    (:data:`~intune_flow.search.intune.VARIANTS`).
    ``known``: measurements taken on ``env`` just before (a scale-out walk's windows); the
    start and intune's AUTOTUNE floor are read from them where they hold those configs,
    instead of measured again.
    """
    from ..errors import TuningError
    from ..progress import make_progress
    if method not in METHODS:
        raise TuningError(f"unknown search method {method!r}; choose one of {list(METHODS)}")
    if variant not in VARIANTS:
        raise TuningError(f"unknown intune variant {variant!r}; choose one of {list(VARIANTS)}")
    if budget_s <= 0:
        raise TuningError(f"budget_s must be positive, got {budget_s!r}")
    rng = np.random.default_rng(seed)
    if method == "intune":
        policy_state = load_policy(policy_state)
        from ..agent import dqn  # noqa: F401  (imported off the clock too)
    tr = Tracker(env, method, budget_s, max_steps, make_progress(progress), known=known)
    given = start is not None
    start = env.space.validate(env.space.fit(start) if given else env.space.defaults())
    if not (given and has_native_autotune(env)):
        start = env.space.concretize(start, env.cpu_budget)
    tr.emit("start", None, config=dict(start), budget_s=float(budget_s))
    if tr.reuse(start, start=True) is None:
        tr.measure(start, start=True)
    state = None
    if tr.start.status == STATUS_EMPTY or (tr.start.status == STATUS_ERROR and not given):
        # The data ran out, or the pipeline raised at its defaults, which no allocation of
        # threads or buffers changes: every probe would read the same, and the budget would
        # go to confirming it. (A given start, a cached config, may fail for its own reason.)
        tr.stop("error")
        return tr.outcome(policy_state=state)
    try:
        if method == "intune":
            state = intune(tr, env, rng, policy_state=policy_state, seed=seed,
                           continuous=continuous, learn=learn, variant=variant)
        else:
            BASELINES[method](tr, env, rng)
    except BudgetSpent:
        pass
    return tr.outcome(policy_state=state)


__all__ = ["METHODS", "VARIANTS", "SEARCHING", "SearchOutcome", "run_search"]

"""The end of a search: the race of its best candidates, and the tie rule that chooses among
configs the noise cannot tell apart (:func:`confirm`)."""

from __future__ import annotations

from ..agent.allocations import BUSY_CPU, pool_at_cores, pool_threads, stage_calls
from ..agent.walk import LOST, config_key
from ..knobs import AUTOTUNE
from ..measurement import Measurement
from .tracker import BudgetSpent, Tracker

CONFIRM = 3             # at most this many best candidates re-measured once at the end
CONFIRM_SHARE = 0.2     # ... about this share of the measurements the budget holds, at least 2
CONFIRM_ROUNDS = 3      # up to this many re-measures each, when the walk converged early
LEAN = 2 / 3            # on a tie, a config holding at most this share of the chosen one's memory


def confirm_count(tr: Tracker) -> int:
    """How many best candidates the end of the search re-measures: ``CONFIRM_SHARE`` of the
    measurements the budget holds (judged by the start's cost), from 2 to ``CONFIRM``."""
    total = tr.measurements_left()
    if total == float("inf"):
        return CONFIRM
    return int(min(CONFIRM, max(2, round(CONFIRM_SHARE * total))))


def _autotuned(config) -> int:
    """How many of ``config``'s knobs are handed to the framework's own tuner."""
    return sum(v == AUTOTUNE for v in config.values())


def confirm(tr: Tracker, count: int = CONFIRM, tie: float = 0.0,
            anchor: Measurement | None = None, pool_look: bool = False) -> None:
    """Re-measure the best ``count`` configs of :func:`contenders`, in a row, and keep the
    one with the best mean of its new looks; among those within ``tie`` of that mean, the
    one with the fewest knobs at AUTOTUNE. ``anchor`` (the best when the smart start
    ended) takes the last place in the race when its windows did not rank it in and the
    last candidate's best window leads its own by no more than ``tie``.

    A single noisy window can crown a config that is not the best; a second look at the
    top candidates, taken close together in time, fixes most of it. The candidates are
    judged on these new looks only: the window that put a config in the top is the luckiest
    of its draws (on a shared machine windows spread by 20-40%), so counting it favours the
    luckiest config. The race takes only as many candidates as the measurements left can
    look at again (none when fewer than 2), so none is compared on its lucky window alone.
    A walk that converged with budget to spare gives them up to ``CONFIRM_ROUNDS`` looks
    each, round by round; one whose look fails is out, as is one the budget stopped before
    its first new look. The chosen config's best window becomes ``tr.best`` (the start's
    own measurement when the start wins) and the mean of its new looks is noted as
    ``best_mean`` (over ``best_looks`` windows). Nothing changes when no candidate got a
    new look, or when the winner's mean is below the start's throughput and the start was
    one of the candidates; where it was not, the start is kept (``chosen_by`` "race, start
    kept"): the start's window is one draw like the new looks, not the luckiest of several,
    and the best window the race just looked at again is its candidates' luck (a
    ``py_function`` pipeline's 60 s search, its budget spent after one new look, returned
    a config on its best window of 5,278 records/s though that look read 4,832 and the
    start's window 5,145).

    The tie rule: a set value runs as it was measured, while AUTOTUNE re-decides in every
    run, so a config that handed knobs to it and won within the noise (``tie``, the walk's
    plateau) is no better measured, only less predictable, and the cache's warm-start
    probe checks a predictable config better. Among the tied with as many knobs at AUTOTUNE,
    one whose peak memory is at most ``LEAN`` of that choice's is taken instead (the best of
    such): the rate is the same within the noise, and the memory is the training's (a
    DataLoader's spawned workers each import torch: 8 held 1.98 GB, 2 held 0.67 GB). A
    config's peak is the highest of its windows, so memory an earlier config left in the
    process only makes a config look heavier, never leaner; a forked worker counts only
    what it adds to the pages it shares. Else, when that choice kept the CPU busy
    (``BUSY_CPU``), the one among them whose thread pools hold the fewest threads (a pool at
    AUTOTUNE holds one per core), where that is fewer than the choice's: on a busy CPU a tie
    is no evidence that the threads past it pay, and the trainer shares the CPU with them
    (on a machine other jobs keep busy, more threads also win a larger share of it, which
    reads as speed: README-only trial 60 chose a 32-thread pool over an 8-thread one by 5%
    on one look, and it read about half the best known side by side).
    ``tie_broken`` is noted when the rule chose.
    Where no race fits, the rule reads each config's best window (:func:`_tie_unraced`).
    ``chosen_by`` notes which rule chose the best: ``"race"`` or ``"best window"``, each
    with ``", tie rule"`` where the tie rule changed the choice.

    The anchor: the walk's single-knob moves after the smart start mostly land within the
    noise of it, and ranking by best window favours the configs drawn most or luckiest, so
    a long walk can fill the race with neighbours that only had lucky windows. Racing the
    smart start's config against them means a longer budget does not lose what a short
    one finds (torchdata thread workers, 3 ms GETs: the 60 s search's race of three such
    neighbours read 0.91-0.96 of the best known, the 20 s search's pick 0.99-1.00).

    The pool: given ``pool_look`` and a measurement left beyond ``count``'s, the
    first candidate's config with its thread pools cut to the env's cores
    (:func:`~intune_flow.agent.allocations.pool_at_cores`) joins the race when it kept the CPU
    busy: the busy-CPU rule's ``POOL_PER_CORE`` threads per core is right on most such
    pipelines and far off on some, by more than one window's noise only on average. It
    is chosen only when its look leads the race; the tie rule does not take it, as it is
    most often one look at a config the walk never measured, or measured once in the smart
    start (:func:`~intune_flow.agent.moves.pool_to_cores`; the generality suite's
    ``interleave`` at 60 s: the rule took it 5.5% behind the lead, and it read 0.93 of the
    best known in that run, 0.89 side by side after it).
    """
    seen = contenders(tr)
    left = tr.measurements_left()
    count = int(min(count, left)) if left != float("inf") else count
    top = sorted(seen.values(), key=lambda ms: -_best_window(ms))[:count]
    own = seen.get(config_key(anchor.config)) if anchor is not None else None
    if own is not None and len(top) >= 2 and not any(ms is own for ms in top) and \
            _best_window(top[-1]) <= _best_window(own) * (1 + tie):
        top[-1] = own
    top = [(ms[0].config, ms) for ms in top]
    cut = pool_at_cores(tr.env.space, max(top[0][1], key=lambda x: x.throughput),
                        tr.env.cpu_budget) if top else None
    # The cut is a challenger also where the walk measured it already (the smart start's
    # pool_to_cores) and it races on those looks: its windows may be the lucky ones.
    challenger = config_key(cut) if cut is not None else None
    if challenger is not None and pool_look and len(top) < left and \
            all(config_key(c) != challenger for c, _ in top):
        top.append((cut, seen.get(challenger, [])))
    if len(top) < 2:
        _tie_unraced(tr, seen.values(), tie)
        return
    tr.note("chosen_by", "best window")
    rounds = int(min(CONFIRM_ROUNDS, max(1, left // len(top))))
    looks: list[list] = [[] for _ in top]
    failed = set()
    try:
        for _ in range(rounds):
            for i, (config, _) in enumerate(top):
                if i in failed:
                    continue
                again = tr.measure(config)
                if again.ok:
                    looks[i].append(again)
                else:
                    failed.add(i)
    except BudgetSpent:
        pass
    compared = [(sum(x.throughput for x in new) / len(new), top[i][1] + new, new)
                for i, new in enumerate(looks) if new and i not in failed]
    if not compared:
        return
    top_mean = max(t[0] for t in compared)
    # The cut pool joins as a challenger: it takes the race by leading it, never on a tie.
    won = [t for t in compared if config_key(t[1][0].config) == challenger and t[0] == top_mean]
    if won:
        (mean, ms, new), lean = won[0], {}
    else:
        tiable = [t for t in compared if config_key(t[1][0].config) != challenger]
        (mean, ms, new), lean = _tie_rule(tiable, lambda t: t[0], lambda t: t[1], tie, tr.env)
    start = tr.start
    start_key = config_key(start.config)
    is_start = config_key(ms[0].config) == start_key
    start_raced = any(config_key(c[1][0].config) == start_key for c in compared)
    if not is_start and start.ok and mean < start.throughput:
        if not start_raced and not tr.rebased_at:
            tr.set_best(start)
            tr.note("chosen_by", "race, start kept")
        return
    if mean < top_mean:
        tr.note("tie_broken", {"top_mean": top_mean, "chosen_mean": mean, **lean})
    tr.note("chosen_by", "race, tie rule" if mean < top_mean else "race")
    tr.set_best(start if is_start else max(ms, key=lambda x: x.throughput))
    tr.note("best_mean", mean)
    tr.note("best_looks", len(new))


def _best_window(ms: list) -> float:
    """The highest throughput among one config's measurements."""
    return max(x.throughput for x in ms)


def contenders(tr: Tracker) -> dict[tuple, list]:
    """The raceable configs whose best window is within ``LOST`` of the highest: one a
    quarter behind on its best window loses a race on its next look too, and the looks go to
    the walk instead (:func:`intune_flow.search.intune._end_has_work`). The generality
    suite's ``own_pool`` at 20 s (full run of 9f02ef2) spent three of its nine measurements
    racing the hybrid against the GETs back at 128 calls, 0.56 of it; no other race of that
    run had a candidate below 0.89 of the lead."""
    seen = raceable(tr)
    if not seen:
        return seen
    lead = max(_best_window(ms) for ms in seen.values())
    return {k: ms for k, ms in seen.items() if _best_window(ms) >= lead * (1 - LOST)}


def raceable(tr: Tracker) -> dict[tuple, list]:
    """The configs measured ok on this machine, each with its measurements; a twin's
    (``same_as``) are left out: its new look would be its twin's old one."""
    seen: dict[tuple, list] = {}
    for m in tr.history[tr.rebased_at:]:
        if m.ok and not m.same_as:
            seen.setdefault(config_key(m.config), []).append(m)
    return seen


def _tie_unraced(tr: Tracker, seen, tie: float) -> None:
    """The tie rule where no race fits, on each config's best window (one window each
    cannot tell them apart either)."""
    top = tr.best
    if top is None or not top.ok:
        return
    bests = [max(ms, key=lambda x: x.throughput) for ms in seen]
    chosen, lean = _tie_rule([top, *bests], lambda m: m.throughput, lambda m: [m], tie, tr.env)
    tr.note("chosen_by", "best window")
    if chosen is not top:
        tr.set_best(chosen)
        tr.note("tie_broken", {"top_best": top.throughput,
                               "chosen_best": chosen.throughput, **lean})
        tr.note("chosen_by", "best window, tie rule")


def _tie_rule(candidates: list, score, looks, tie: float, env=None):
    """The tie rule: among ``candidates`` whose ``score`` is within ``tie`` of the best one
    (but for those that set a knob below what AUTOTUNE ran it at in the best one:
    :func:`_below_autotune`), the one whose config has the fewest knobs at AUTOTUNE (then
    the higher score); then,
    among those tied with as many knobs at AUTOTUNE, the best of any holding at most
    ``LEAN`` of its memory, else, when the choice kept the CPU busy in every look, the one
    whose thread pools hold the fewest threads, where that is fewer than the choice's
    (``env``'s space and cores say which knobs are pools); in a space without a pool (torch:
    each stage's workers are its own processes or threads), the one whose stages hold the
    fewest workers, where no knob of the choice is at AUTOTUNE. On a busy CPU the extra
    workers only take turns: README-only trial 93's DataLoader race returned 7 worker
    processes on 2 cores over 5, their means 2.6% apart, and side by side they read the same.
    ``looks(c)`` is a candidate's measurements. Returns the choice and what it holds against
    the heavier config it was taken over (``{}`` when neither step chose)."""
    lead = max(candidates, key=score)
    top = score(lead)
    tied = [c for c in candidates if c is lead or (
        score(c) >= top * (1 - tie) and not _below_autotune(looks(c)[0].config, looks(lead)))]
    chosen = min(tied, key=lambda c: (_autotuned(looks(c)[0].config), -score(c)))
    autotuned, held = _autotuned(looks(chosen)[0].config), _peak_rss(looks(chosen))
    alike = [c for c in tied if _autotuned(looks(c)[0].config) == autotuned]
    lean = [c for c in alike if 0 < _peak_rss(looks(c)) <= LEAN * held]
    if lean:
        leanest = max(lean, key=score)
        return leanest, {"chosen_rss": _peak_rss(looks(leanest)), "instead_rss": held}
    if env is None or min(m.cpu_util for m in looks(chosen)) < BUSY_CPU:
        return chosen, {}

    pooled = pool_threads(env.space, looks(chosen)[0].config, env.cpu_budget) is not None
    if not pooled and autotuned:
        return chosen, {}       # calls at AUTOTUNE are not counted: no fair comparison

    def threads(c) -> float:
        config = looks(c)[0].config
        if pooled:
            return pool_threads(env.space, config, env.cpu_budget)
        return float(stage_calls(env.space, config))

    held_threads = threads(chosen)
    fewer = [c for c in alike if threads(c) < held_threads]
    if not fewer:
        return chosen, {}
    fewest = min(fewer, key=lambda c: (threads(c), -score(c)))
    kind = "pool_threads" if pooled else "workers"
    return fewest, {f"chosen_{kind}": threads(fewest), f"instead_{kind}": held_threads}


def _below_autotune(config: dict, lead: list) -> bool:
    """Whether ``config`` sets a knob below the value AUTOTUNE ran it at in the ``lead``'s
    measurements (where it read one): such a config is not the lead made predictable but
    a smaller one, and a tie on a look or two does not say it keeps up. A README-only
    trial's batch-first pipeline (a heavy map after ``batch``) had its 20 s race return
    the map at one call over the map at AUTOTUNE, which held it at 2, on means 6% apart:
    0.74 of all-AUTOTUNE side by side."""
    chose: dict[str, int] = {}
    for m in lead:
        for name, value in m.autotune_choices.items():
            chose[name] = max(chose.get(name, 0), int(value))
    lead_config = lead[0].config
    return any(lead_config.get(name) == AUTOTUNE and config.get(name, AUTOTUNE) != AUTOTUNE
               and config[name] < value for name, value in chose.items())


def _peak_rss(ms: list) -> int:
    """The highest memory a config's measurements held."""
    return max(m.peak_rss for m in ms)

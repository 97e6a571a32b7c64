"""The decision at the end of a run: which model ``best/`` holds, and why.

Candidates: the start model (step 0), every evaluated checkpoint, and blends ``(1 - a) * start + a * checkpoint``
(``interpolate``: a list adds fixed weights a, ``auto`` the grid 0.25 / 0.5 / 0.75). The selector scores every
candidate. Guards are constraints: a candidate passes when each guard's score is within that guard's tolerance of
the start model's (a guard is asked of a plain candidate only when it would be kept). When a checkpoint beats every
candidate so far on the selection metric but fails a guard, the blend weight is searched by bisection between the
start model (a = 0, passes) and the checkpoint (a = 1, fails), assuming the guard falls as a rises, to a width of
0.05 in at most ``SEARCH_SCORINGS`` scorings; ``interpolate: none`` switches blends and the search off. The winner is
the best selection score the guards allow among everything scored. The room's state is plain data (it rides in the
training checkpoint, so a resumed run decides as an uninterrupted one), and its report -- the frontier of every
scored candidate and one sentence on why best/ is what it is -- goes to the closing lines, summary.json and the
model card.

The model under selection is reached through ``CandidateModel``: the weights it has now (the checkpoint), its blends
with the start model, scoring, and saving best/.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

from mixcse.errors import ConfigError
from mixcse.evaluation.selection import better
from mixcse.models.merge import blend
from mixcse.utils.tables import number

SEARCH_WIDTH = 0.05  # the bisection stops when the passing and the failing weight are this close
SEARCH_SCORINGS = 5  # at most this many extra scorings per search (1/2**5 < SEARCH_WIDTH)
STATE_KEYS = ("best_dev", "best_step", "best_alpha", "raw_dev", "guard_start", "guard_best", "bad_evals",
              "candidates")


@dataclass
class Guard:
    """One forgetting guard: an evaluator, the data it reads (as configured) and how far below the start model's
    score a candidate may fall (above, for a metric where lower is better)."""
    evaluator: object
    data: str
    tolerance: float

    @property
    def name(self) -> str:
        return self.evaluator.name

    @property
    def worse(self) -> str:  # the direction a guard's score moves when the model forgets
        return "below" if self.evaluator.greater_is_better else "above"

    def passes(self, score: float | None, start: float | None) -> bool:
        if score is None or start is None:
            return True
        if self.evaluator.greater_is_better:
            return score >= start - self.tolerance - 1e-9
        return score <= start + self.tolerance + 1e-9


class CandidateModel:
    """The model under selection. ``use(a)`` puts a candidate's weights in place: the checkpoint (a = 1) or its blend
    with the start model; leaving the ``with`` block puts the checkpoint back bit for bit. ``score(evaluator,
    phase)`` gives (primary metric, extras) of the weights in place; ``save()`` writes them to best/."""

    def __init__(self, module, start_state: dict | None, score, save):
        self.module, self.start_state, self.score, self.save = module, start_state, score, save
        self._checkpoint, self._alpha = None, 1.0

    def use(self, alpha: float) -> None:
        if alpha == self._alpha:
            return
        if self._checkpoint is None:
            self._checkpoint = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        self.module.load_state_dict(self._checkpoint if alpha == 1.0 else blend(self.start_state, self._checkpoint,
                                                                                 alpha))
        self._alpha = alpha

    def __enter__(self) -> "CandidateModel":
        return self

    def __exit__(self, *exc) -> None:
        self.use(1.0)


def initial_state() -> dict:
    return {"best_dev": None, "best_step": None, "best_alpha": 1.0, "raw_dev": None, "guard_start": None,
            "guard_best": None, "bad_evals": 0, "candidates": []}


def upgraded(state: dict) -> dict:
    """A checkpoint's selection state in today's layout (one guard's scores were plain numbers)."""
    state = {**initial_state(), **{k: state[k] for k in STATE_KEYS if k in state}}
    for key in ("guard_start", "guard_best"):
        if isinstance(state[key], (int, float)):
            state[key] = [state[key]]
    for c in state["candidates"]:
        if "guard" in c and "guards" not in c:
            c["guards"] = [c.pop("guard")]
    return state


class Selection:
    """The decision room: ``evaluate(step, model, state)`` scores one evaluation's candidates and returns the new
    state, the metrics records and the log lines; ``report(state)`` is what the run says and writes at its end."""

    def __init__(self, selector, guards: list[Guard], *, blend_weights: list[float], search: bool,
                 patience: int | None = None, names: dict[int, str] | None = None, shipped: str = "best/"):
        self.selector, self.guards = selector, list(guards)
        self.blend_weights, self.search = list(blend_weights), bool(search and guards)
        self.patience = patience
        self.names = names or {}  # how a candidate's step is called (mixcse merge: the start and the adapted model)
        self.shipped = shipped  # what the chosen candidate becomes

    def _name(self, step: int) -> str:
        return self.names.get(step, f"step {step}")

    @property
    def needs_start_weights(self) -> bool:
        return len(self.blend_weights) > 1 or self.search

    # ------------------------------------------------------------------------------------------------ scoring
    def evaluate(self, step: int, model: CandidateModel, state: dict) -> dict:
        """Score this evaluation's candidates -- the model (and with blends or a search, its blends with the start
        model) -- and decide. best/ is written once, for the winner of this evaluation, if it beats every earlier
        candidate (the start model, step 0, included) and passes every guard."""
        new = {**upgraded(state), "candidates": list(state.get("candidates") or [])}
        before = (new["best_dev"], new["best_step"], new["best_alpha"])
        records, lines = [], []
        with model:
            for alpha in ([1.0] if step == 0 else self.blend_weights):
                if any(c["step"] == step and c["alpha"] == alpha for c in new["candidates"]):
                    continue  # scored already by this evaluation's search
                candidate = self._candidate(step, alpha, model, new, records, lines)
                if step and alpha == 1.0 and candidate.get("accepted") is False and self.search:
                    self._search(step, model, new, records, lines)
            winner = (new["best_dev"], new["best_step"], new["best_alpha"])
            improved = winner != before
            if improved:
                model.use(new["best_alpha"])
                model.save()
        new["bad_evals"] = 0 if improved or step == 0 else new["bad_evals"] + 1
        stop = step > 0 and self.patience is not None and new["bad_evals"] >= self.patience
        return {"state": new, "records": records, "lines": lines, "improved": improved, "stop": stop}

    def _candidate(self, step: int, alpha: float, model: CandidateModel, new: dict, records: list, lines: list,
                   *, ask_guards: bool = False) -> dict:
        """Score one candidate, ask the guards when it would be kept (or ``ask_guards``), update ``new``."""
        model.use(alpha)
        score, extras = model.score(self.selector, "select")
        wins = new["best_step"] is None or better(score, new["best_dev"], self.selector.greater_is_better)
        guarded = None
        if self.guards and (wins or ask_guards or step == 0):
            guarded = [model.score(guard.evaluator, "guard")[0] for guard in self.guards]
        if step == 0:
            for guard, start in zip(self.guards, guarded or []):
                if not math.isfinite(start):
                    raise ConfigError(f"guard {guard.name} ({guard.data}): the start model scores {start} on it; a "
                                      f"guard compares candidates with a finite start score (check its data)")
            new.update(raw_dev=score, guard_start=guarded)
        accepted = None if guarded is None else self._passes(guarded, new["guard_start"])
        if wins and accepted is not False:
            new.update(best_dev=score, best_step=step, best_alpha=alpha, guard_best=guarded)
        candidate = {"step": step, "alpha": alpha, "score": score}
        # a blend's score has its own key: a tracker's curve of the selection metric stays the checkpoints'
        record = {"step": step, (self.selector.name if alpha == 1.0 else f"blend_{self.selector.name}"): score,
                  **extras}
        if alpha != 1.0:
            record["alpha"] = alpha
        if guarded is not None:
            candidate.update(guards=guarded, accepted=accepted)
            record.update({("guard" if i == 0 else f"guard{i + 1}"): s for i, s in enumerate(guarded)},
                          guard_accepted=accepted)
        record.update(best_dev=new["best_dev"], best_step=new["best_step"])
        new["candidates"].append(candidate)
        records.append(record)
        lines.append(self._line(candidate, new))
        return candidate

    def _passes(self, scores: list[float], starts: list[float] | None) -> bool:
        starts = starts or [None] * len(self.guards)
        return all(g.passes(s, s0) for g, s, s0 in zip(self.guards, scores, starts))

    def _search(self, step: int, model: CandidateModel, new: dict, records: list, lines: list) -> None:
        """Bisection of the blend weight between the start model (passes) and this checkpoint (refused)."""
        low, high = 0.0, 1.0
        for _ in range(SEARCH_SCORINGS):
            if high - low <= SEARCH_WIDTH + 1e-12:
                break
            mid = round((low + high) / 2, 6)
            candidate = self._candidate(step, mid, model, new, records, lines, ask_guards=True)
            low, high = (mid, high) if candidate["accepted"] else (low, mid)

    def _line(self, c: dict, new: dict) -> str:
        name = self.selector.name + (f" of the blend {c['alpha']:g}" if c["alpha"] != 1.0 else "")
        what = " (start model)" if c["step"] == 0 else f" (best {new['best_dev']:.2f} @ {new['best_step']})"
        if self.names:
            what = "" if c["step"] == 0 else f" (best {new['best_dev']:.2f}: {self._name(new['best_step'])})"
        line = f"{self._name(c['step'])}: {name} {c['score']:.2f}{what}"
        for guard, score, start in zip(self.guards, c.get("guards") or [], new["guard_start"] or []):
            line += f"; guard {guard.name} {score:.2f}"
            if not guard.passes(score, start):
                line += f": refused, more than {guard.tolerance:g} {guard.worse} the start's {start:.2f}"
        return line

    # ------------------------------------------------------------------------------------------------ report
    def report(self, state: dict) -> dict:
        """The selection part of summary.json: the guards, every scored candidate (the frontier) and the decision."""
        state = upgraded(state)
        out = {"best_alpha": state["best_alpha"], "candidates": state["candidates"], "decision": self.decision(state)}
        if self.guards:
            out["guards"] = [
                {"metric": g.name, "data": g.data, "description": g.evaluator.description, "tolerance": g.tolerance,
                 "start": (state["guard_start"] or [None] * len(self.guards))[i],
                 "best": (state["guard_best"] or [None] * len(self.guards))[i],
                 "refused": [{"step": c["step"], "alpha": c["alpha"]} for c in state["candidates"]
                             if c.get("guards") and not g.passes(c["guards"][i],
                                                                 (state["guard_start"] or [None] * len(self.guards))[i])]}
                for i, g in enumerate(self.guards)]
        return out

    def decision(self, state: dict) -> str:
        """One sentence on why the shipped model (best/) is what it is."""
        metric, cands = self.selector.name, state["candidates"]
        start, best = state["raw_dev"], state["best_dev"]
        gib = self.selector.greater_is_better
        beat = [c for c in cands if c["step"] > 0 and better(c["score"], start, gib)]
        plain = [c for c in cands if c["step"] > 0 and c["alpha"] == 1.0]
        top = max(plain, key=lambda c: c["score"] if gib else -c["score"], default=None)
        if state["best_step"] in (0, None):
            if not beat:
                return f"no step beat the start model's {metric} {number(start)}; {self.shipped} is the start model"
            refused = [c for c in beat if c.get("accepted") is False]
            why = self._refusal(refused[0], state) if refused else ""
            return (f"{len(beat)} candidate(s) beat the start model's {metric} {number(start)} but every one failed a "
                    f"guard ({why}); {self.shipped} is the start model")
        chosen = next((c for c in cands if c["step"] == state["best_step"] and c["alpha"] == state["best_alpha"]),
                      None)
        kept = f"{metric} {number(best)} (start {number(start)})"
        if state["best_alpha"] == 1.0:
            held = "" if not self.guards else "; " + ", ".join(
                f"{g.name} {number(s)} within {g.tolerance:g} of {number(s0)}"
                for g, s, s0 in zip(self.guards, state["guard_best"] or [], state["guard_start"] or []))
            return (f"{self.shipped} is {self._name(state['best_step'])}: the best {kept} of {len(cands)} "
                    f"candidates{held}")
        refused_top = next((c for c in plain if c["step"] == state["best_step"] and c.get("accepted") is False), None)
        if refused_top is not None:
            guards = ", ".join(f"{g.name} {number(s)}" for g, s in zip(self.guards, chosen.get("guards") or []))
            return (f"{self._name(state['best_step'])} scored {number(refused_top['score'])} but "
                    f"{self._refusal(refused_top, state)}; the blend a {state['best_alpha']:.2f} keeps {number(best)} "
                    f"at {guards} (start {number(start)})")
        if top is not None and better(top["score"], best, gib):
            return (f"{self.shipped} is the blend a {state['best_alpha']:g} of {self._name(state['best_step'])}: "
                    f"{kept}; the best plain one ({self._name(top['step'])}, {number(top['score'])}) was refused by a "
                    f"guard")
        return (f"{self.shipped} is the blend a {state['best_alpha']:g} of {self._name(state['best_step'])}: the best "
                f"{kept}")

    def _refusal(self, c: dict, state: dict) -> str:
        starts = state["guard_start"] or []
        failed = [(g, s, s0) for g, s, s0 in zip(self.guards, c.get("guards") or [], starts) if not g.passes(s, s0)]
        return "; ".join(f"{g.name} {'fell' if g.evaluator.greater_is_better else 'rose'} to {number(s)}, more than "
                         f"{g.tolerance:g} {g.worse} {number(s0)}" for g, s, s0 in failed) or "a guard refused it"

    def frontier_lines(self, state: dict) -> list[str]:
        """The frontier as plain lines: every scored candidate with its guard scores."""
        state = upgraded(state)
        head = f"{'step':>6} {'a':>6} {self.selector.name:>12}" + "".join(f" {g.name:>12}" for g in self.guards)
        rows = [head + ("  accepted" if self.guards else "")]
        for c in state["candidates"]:
            scores = c.get("guards") or [None] * len(self.guards)
            rows.append(f"{c['step']:>6} {c['alpha']:>6.3g} {number(c['score']):>12}"
                        + "".join(f" {number(s):>12}" for s in scores)
                        + (f"  {dict([(True, 'yes'), (False, 'refused')]).get(c.get('accepted'), '-')}"
                           if self.guards else ""))
        return rows


    def plot(self, path, state: dict) -> bool:
        """frontier.png (with the [plots] extra): the selection score against each guard's score, one point per
        candidate, the blends of a checkpoint joined as a line from the start model, the refused region shaded;
        False, writing nothing, without matplotlib or guards."""
        try:
            import matplotlib
        except ImportError:
            return False
        state = upgraded(state)
        scored = [c for c in state["candidates"] if c.get("guards")]
        if not self.guards or not scored:
            return False
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(self.guards), figsize=(5.5 * len(self.guards), 4.2), squeeze=False)
        start = next(c for c in scored if c["step"] == 0)
        for i, (guard, ax) in enumerate(zip(self.guards, axes[0])):
            s0 = start["guards"][i]
            limit = s0 - guard.tolerance if guard.evaluator.greater_is_better else s0 + guard.tolerance
            low, high = min(c["guards"][i] for c in scored), max(c["guards"][i] for c in scored)
            span = max(high - low, guard.tolerance, 1e-3)
            ax.axhspan(limit, (low - span) if guard.evaluator.greater_is_better else (high + span), color="red",
                       alpha=0.08, label=f"refused (beyond {guard.tolerance:g} of the start)")
            ax.axhline(limit, color="red", lw=0.8)
            for step in sorted({c["step"] for c in scored if c["step"] > 0}):
                line = sorted([start] + [c for c in scored if c["step"] == step],
                              key=lambda c: 0.0 if c["step"] == 0 else c["alpha"])  # from the start model (a = 0)
                ax.plot([c["score"] for c in line], [c["guards"][i] for c in line], "-", lw=0.8, alpha=0.6)
                for c in line[1:]:
                    ax.plot(c["score"], c["guards"][i], "o" if c["alpha"] == 1.0 else ".", ms=6 if c["alpha"] == 1.0
                            else 5, color=ax.lines[-1].get_color())
                    ax.annotate(f"{step}" if c["alpha"] == 1.0 else f"{c['alpha']:.2g}", (c["score"], c["guards"][i]),
                                fontsize=7, xytext=(3, 3), textcoords="offset points")
            ax.plot(start["score"], s0, "k*", ms=10, label="start model")
            chosen = [c for c in scored if c["step"] == state["best_step"] and c["alpha"] == state["best_alpha"]]
            if chosen:
                ax.plot(chosen[0]["score"], chosen[0]["guards"][i], "o", mfc="none", mec="k", ms=13, label="best/")
            ax.set_ylim(low - 0.15 * span, high + 0.15 * span)
            ax.set_xlabel(f"{self.selector.name} (selection)")
            ax.set_ylabel(f"{guard.name} (guard)")
            ax.legend(fontsize=7, loc="best")
        fig.suptitle("candidates: steps (o, labelled by step) and their blends with the start model (., by weight)",
                     fontsize=9)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True



def search_blend(start: str, adapted: str, *, select_data: str, guard_data: list[str] | None,
                 guard_tolerance: list[float], data_dir: str | None, output, batch_size: int = 64,
                 echo=print) -> dict:
    """``mixcse merge START ADAPTED --select-data ...``: the selection of a run, after the fact. The start model and
    the adapted one are scored on ``select_data`` and the guards; when the adapted model wins but a guard refuses
    it, the blend weight is searched as in training; the best candidate the guards allow is written to ``output``
    (``merge_models(start, adapted, [1 - a, a])``, bit for bit what ``--weights`` gives). Every input is checked
    before anything is scored or written. Returns the selection report."""
    from mixcse.evaluation.selection import build_guard, build_selector
    from mixcse.models.merge import load_mergeable, merge_models, merge_state_dicts
    from mixcse.models.sentence_encoder import SentenceEncoder
    from mixcse.utils.files import check_new_folder

    output = Path(output)
    check_new_folder(output)
    selector, _ = build_selector("pairs", data_dir=None, select_data=select_data, select_split="dev")
    guards = [Guard(build_guard(data, data_dir=data_dir), data, tolerance)
              for data, tolerance in zip(guard_data or [], guard_tolerance)]
    _, _, ((start_encoder, _, info), (adapted_encoder, tokenizer, _)) = load_mergeable([str(start), str(adapted)])
    start_state = {k: v.detach().clone() for k, v in start_encoder.state_dict().items()}
    merge_state_dicts([start_state, adapted_encoder.state_dict()], [0.5, 0.5], names=[str(start), str(adapted)])
    del start_encoder
    adapted_encoder.eval()
    # scored as it will be written: the output is START's folder (its inference length) with the blended weights
    inference = SentenceEncoder(adapted_encoder, tokenizer, max_seq_length=info.get("max_seq_length"), device="cpu")

    def score(evaluator, phase):
        results = evaluator(inference, batch_size=batch_size)
        return evaluator.primary(results), evaluator.extras(results)

    room = Selection(selector, guards, blend_weights=[1.0], search=True,
                     names={0: "the start model", 1: "the adapted model"}, shipped=str(output))
    state = initial_state()
    for step, weights in ((0, start_state), (1, None)):
        with contextlib.ExitStack() as restore:
            if weights is not None:  # the start model's weights in place, then the adapted model's back
                adapted_state = {k: v.detach().clone() for k, v in adapted_encoder.state_dict().items()}
                adapted_encoder.load_state_dict(weights)
                restore.callback(adapted_encoder.load_state_dict, adapted_state)
            decided = room.evaluate(step, CandidateModel(adapted_encoder, start_state, score, lambda: None), state)
        state = decided["state"]
        for line in decided["lines"]:
            echo(line)
    report = room.report(state)
    echo("\n".join(["candidates scored (the frontier):", *room.frontier_lines(state),
                     f"decision: {report['decision']}"]))
    alpha = state["best_alpha"] if state["best_step"] == 1 else 0.0
    merge_models([start, adapted], [1.0 - alpha, alpha], output=output)
    return {**report, "alpha": alpha, "output": str(output)}

#!/usr/bin/env python3
"""KernelTuner's search strategies, in its simulation mode, on recorded spaces in the T4 format:
the other side of `scripts/bench-search` (Shoal's side is `shoal-bench search`). Needs the
`kernel-tuner` package, 1.5.0 (scripts/bench-search installs it into a virtual environment).

Usage:
  bench_search_kerneltuner.py --space FILE [--space FILE ...] [--budget 5%] [--budget 200]
                              [--reps 10] [--strategies genetic_algorithm,mls,...]

For each space, budget and strategy, over seeds 1..reps, it prints
  kerneltuner-run space=<file name> budget=<b> evaluations=<n> strategy=<s> median=<r> p10=<r>
                  p90=<r> within_2pct=<share> secs=<s>
and, last per space and budget, the strategy with the lowest median (on a tie, the larger share
within 2 %):
  kerneltuner space=<file name> budget=<b> best=<strategy>:<median ratio>:<share within 2%>
A ratio is the best valid time a run found over the space's optimum (inf if it found none).

What makes the comparison with `shoal-bench search` fair:
- The objective of a configuration is read as crates/shoal-backend/src/replay/t4.rs reads it: the
  `time` measurement, else the mean of `times.runtimes`; none (a failure) when `invalidity` is
  not "correct" or the time is not > 0. The optimum is the least such time over the file.
- The T4 file becomes a KernelTuner cache file (its own JSON format, the one simulation mode
  reads: `"cache": {"v1,v2,...": {param: value, ..., "time": t}}`). A failure gets, as its
  `time`, the string KernelTuner writes for its kind ("CompilationFailedConfig" for
  invalidity "compile", "RuntimeFailedConfig" for "runtime" or a missing time,
  "InvalidConfig" otherwise); KernelTuner's read_cache turns these into `__error__` entries,
  which every strategy sees as the worst cost, as Shoal's strategies see failures.
- The search space is exactly the recorded configurations, failed ones included: tune_params
  hold each parameter's recorded values (numbers in numeric order, as Shoal orders them), and a
  restriction keeps only the recorded combinations. (KernelTuner's own `tune_cache` infers a
  restriction that drops failed configurations, which would give it a smaller space and free
  failures; that is not used.)
- The budget is the same count as Shoal's (Budget::evaluations in
  crates/shoal-model/src/search/budget.rs: a count, or round(share x number of
  configurations), at least 1 and at most the space), given as
  strategy_options={"max_fevals": n}. KernelTuner's SimulationRunner counts an evaluation the
  first time a configuration is served from the cache, failed ones included, and serves
  repeats for free; configurations outside the restrictions never reach the runner. Shoal's
  strategies never propose a candidate twice and count every proposal, failures included, so
  both sides get n distinct configurations of the same set. Some KernelTuner strategies stop
  on their own before the budget (their own iteration or convergence limits: dual_annealing,
  simulated_annealing, basinhopping, genetic_algorithm's 90 generations, at times pso and
  adaptive_tabu_greywolf); those runs are scored on what they found, and the mean number of
  evaluations they used is printed on stderr.
- Each run seeds Python's `random` and NumPy's global generator with the seed (1..reps, as
  Shoal's side), passes it as tune_kernel's `seed`, and LatinHypercube (bayes_opt's initial
  sample and diff_evo's populations, which scipy would otherwise draw from fresh entropy) is
  given a generator drawn from NumPy's seeded one, so runs are repeatable.
- Quantiles as the Rust side takes them: sorted ratios, index round((len - 1) x p), rounding
  halves away from zero (so the median of 10 runs is the 6th).

Strategies of kernel_tuner 1.5.0 (its strategy_map) and the default set, DEFAULT_STRATEGIES:
those that run in simulation mode on both recorded spaces, in well under a second a run but
for basinhopping (up to 1 s) and hybrid_vndx (up to 15 s a run at 1,113 evaluations of the
dedispersion space); the whole set at 1, 2, 5 and 10 % over 10 seeds takes about 1.5 minutes
on the convolution space and 5 on dedispersion. Left out of the default (each still runs with
--strategies):
- bayes_opt: runs, but slowly (about 50 s a run at 1,113 evaluations of the 11,130-config
  dedispersion space, 13 minutes for 10 seeds at 1, 2, 5 and 10 %); and in 1.5.0 it takes failed
  configurations for valid ones: CostFunc gives them the cost sys.float_info.max while
  bayes_opt only recognises its own invalid value 1e20, so they enter its Gaussian process as
  huge observations (on the convolution space at 5 %, median 1.674 as shipped against 1.212
  with the two matched).
- nsga2, nsga3 (pymoo): multi-objective; nsga2 runs on one objective but takes about 30 s a
  run on the 4,362-config space.
- minimize: one local descent from one start point; stops after about 10 evaluations.
- brute_force: the whole space.
- skopt and pyatf_strategies: need scikit-optimize and pyATF, which kernel_tuner does not
  install (ModuleNotFoundError).
"""

import argparse
import contextlib
import gzip
import io
import json
import logging
import math
import os
import random
import re
import sys
import tempfile
import time
import warnings

# Strategies that run in simulation mode on the recorded spaces (kernel_tuner 1.5.0).
DEFAULT_STRATEGIES = [
    "random_sample",
    "genetic_algorithm",
    "diff_evo",
    "greedy_ils",
    "greedy_mls",
    "ordered_greedy_mls",
    "mls",
    "dual_annealing",
    "simulated_annealing",
    "pso",
    "firefly_algorithm",
    "basinhopping",
    "hybrid_vndx",
    "adaptive_tabu_greywolf",
]


def rust_round(x):
    """Rust's f64::round for x >= 0: halves away from zero (Python's round() goes to even)."""
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


def evaluations(budget, size):
    """`200` or `5%` of `size`, at least 1 and at most `size`: Shoal's Budget::parse and
    Budget::evaluations (crates/shoal-model/src/search/budget.rs)."""
    text = budget.strip()
    if text.endswith("%"):
        try:
            p = float(text[:-1].strip())
        except ValueError:
            sys.exit(f"budget `{text}`: a count or a share such as 5%")
        if not (p > 0.0 and p <= 100.0):
            sys.exit(f"budget `{text}`: a share in (0, 100]%")
        n = rust_round(size * p / 100.0)
    elif re.fullmatch(r"\+?[0-9]+", text) and int(text) > 0:
        n = int(text)
    else:
        sys.exit(f"budget `{text}`: a count of at least 1 or a share such as 5%")
    return min(max(n, 1), size)


def number(v):
    """A JSON number as a float (serde_json's as_f64), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def read_t4(path):
    """The configurations of a T4 file: parameter names, and per configuration its values,
    its objective (None: failed) and its failure kind, as crates/shoal-backend/src/replay/t4.rs."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        sys.exit(f"{path}: no `results` array (T4 format)")
    names = list(results[0]["configuration"].keys()) if results else []
    entries = []
    for r in results:
        conf = r.get("configuration") or {}
        values = tuple(conf.get(n) for n in names)
        invalidity = r.get("invalidity")
        valid = invalidity == "correct"
        runtimes = [x for x in (number(v) for v in (r.get("times") or {}).get("runtimes") or []) if x is not None]
        measured = None
        for m in r.get("measurements") or []:
            if isinstance(m, dict) and m.get("name") == "time":
                measured = number(m.get("value"))
                break
        mean = sum(runtimes) / len(runtimes) if runtimes else None
        t = (measured if measured is not None else mean) if valid else None
        if t is not None and not t > 0.0:
            t = None
        if t is not None:
            kind = None
        elif invalidity == "compile":
            kind = "CompilationFailedConfig"
        elif invalidity in ("runtime", "correct"):
            kind = "RuntimeFailedConfig"
        else:
            kind = "InvalidConfig"
        entries.append((values, t, kind))
    return names, entries


def value_order(v):
    """Shoal's order of a parameter's values: by number where the value's text (strings as they
    are, numbers as JSON writes them) parses as one, else by text."""
    text = v if isinstance(v, str) else json.dumps(v)
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


class Space:
    """A T4 file as KernelTuner sees it: tune_params, the recorded combinations, a cache file."""

    def __init__(self, path, workdir):
        self.path = path
        self.name = os.path.basename(path)
        self.names, entries = read_t4(path)
        self.size = len(entries)
        times = [t for _, t, _ in entries if t is not None]
        if not times:
            sys.exit(f"{path}: no valid configuration")
        self.optimum = min(times)
        self.tune_params = {}
        for i, n in enumerate(self.names):
            vals = []
            for values, _, _ in entries:
                if values[i] not in vals:
                    vals.append(values[i])
            self.tune_params[n] = sorted(vals, key=value_order)
        cache = {}
        for values, t, kind in entries:
            key = ",".join(str(v) for v in values)
            if key in cache:
                print(f"kerneltuner: {self.name}: configuration {key} recorded twice, first kept", file=sys.stderr)
                continue
            entry = dict(zip(self.names, values))
            entry["time"] = t if t is not None else kind
            # No compile/verification/benchmark times: the runner then adds no simulated time.
            cache[key] = entry
        self.configs = {tuple(values) for values, _, _ in entries}
        print(
            f"kerneltuner: {self.name}: {self.size} candidates, {len(times)} valid, optimum {self.optimum:.4f}",
            file=sys.stderr,
        )
        self.cachefile = os.path.join(workdir, f"space{id(self)}.json")
        with open(self.cachefile, "w") as f:
            json.dump(
                {
                    "device_name": "recorded",
                    "kernel_name": "recorded",
                    "problem_size": [1],
                    "tune_params_keys": self.names,
                    "tune_params": self.tune_params,
                    "objective": "time",
                    "cache": cache,
                },
                f,
            )

    def restriction(self):
        from constraint import FunctionConstraint

        configs = self.configs

        def recorded(*values):
            return values in configs

        # Over all parameters, which python-constraint passes in tune_params order.
        return FunctionConstraint(recorded)


def seed_everything(seed):
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)


def seeded_latin_hypercube():
    """Give scipy's LatinHypercube, where KernelTuner builds it without a seed (bayes_opt's
    initial sample, Searchspace.get_LHS_sample for diff_evo's populations), a generator drawn
    from NumPy's global (seeded) one, so those runs repeat with the seed."""
    import numpy as np
    import scipy.stats.qmc as qmc

    class LatinHypercube(qmc.LatinHypercube):
        def __init__(self, *args, **kwargs):
            if kwargs.get("rng") is None and kwargs.get("seed") is None:
                kwargs["rng"] = np.random.default_rng(np.random.randint(2**31))
            super().__init__(*args, **kwargs)

    import kernel_tuner.strategies.bayes_opt

    qmc.LatinHypercube = LatinHypercube  # searchspace.py imports it from there when it samples
    kernel_tuner.strategies.bayes_opt.LatinHypercube = LatinHypercube


def run(space, strategy, seed, budget):
    """One search: the best valid time it found (inf if none) and the configurations it used."""
    from kernel_tuner import tune_kernel

    seed_everything(seed)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = tune_kernel(
            "recorded",
            "",
            (1,),
            [],
            space.tune_params,
            restrictions=[space.restriction()],
            strategy=strategy,
            strategy_options={"max_fevals": budget},
            cache=space.cachefile,
            simulation_mode=True,
            quiet=True,
            verbose=False,
            seed=seed,
        )
    best, used = math.inf, set()
    for r in results:
        values = tuple(r.get(n) for n in space.names)
        if values in space.configs:
            used.add(values)
        t = r.get("time")
        if "__error__" not in r and number(t) is not None:
            best = min(best, t)
    return best, len(used)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", action="append", required=True, help="a T4 file (.json or .json.gz); repeatable")
    parser.add_argument("--budget", action="append", help="a count or a share such as 5%%; repeatable (default 5%%)")
    parser.add_argument("--reps", type=int, default=10, help="seeds per strategy (default 10)")
    parser.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES), help="comma-separated KernelTuner strategies")
    args = parser.parse_args()
    budgets = args.budget or ["5%"]
    strategies = [s for s in args.strategies.split(",") if s]
    if args.reps < 1:
        sys.exit("--reps: at least 1")

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    seeded_latin_hypercube()
    with tempfile.TemporaryDirectory(prefix="bench-search-kt-") as workdir:
        for path in args.space:
            space = Space(path, workdir)
            for budget in budgets:
                n = evaluations(budget, space.size)
                best = None
                for strategy in strategies:
                    clock = time.perf_counter()
                    try:
                        runs = [run(space, strategy, seed, n) for seed in range(1, args.reps + 1)]
                    except Exception as e:  # a strategy that fails here is reported and skipped
                        print(f"kerneltuner: {space.name} budget={budget} {strategy}: failed: {e!r}", file=sys.stderr)
                        continue
                    secs = time.perf_counter() - clock
                    ratios = sorted(b / space.optimum for b, _ in runs)
                    used = [u for _, u in runs]

                    def q(p):
                        return ratios[rust_round((len(ratios) - 1) * p)]

                    within = sum(r <= 1.02 for r in ratios) / len(ratios)
                    print(
                        f"kerneltuner-run space={space.name} budget={budget} evaluations={n} strategy={strategy} "
                        f"median={q(0.5):.4f} p10={q(0.1):.4f} p90={q(0.9):.4f} within_2pct={within:.2f} secs={secs:.3f}",
                        flush=True,
                    )
                    if max(used) > n:
                        print(f"kerneltuner: {space.name} budget={budget} {strategy}: used {max(used)} > {n} evaluations", file=sys.stderr)
                    if min(used) < n:
                        print(
                            f"kerneltuner: {space.name} budget={budget} {strategy}: used {sum(used) / len(used):.1f} "
                            f"of {n} evaluations on average (fewest {min(used)})",
                            file=sys.stderr,
                            flush=True,
                        )
                    # The lowest median; on a tie, the larger share within 2 %.
                    if best is None or (q(0.5), -within) < (best[1], -best[2]):
                        best = (strategy, q(0.5), within)
                if best is None:
                    sys.exit(f"{space.name}: no strategy ran")
                print(
                    f"kerneltuner space={space.name} budget={budget} best={best[0]}:{best[1]:.4f}:{best[2]:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

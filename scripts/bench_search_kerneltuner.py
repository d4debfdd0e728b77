#!/usr/bin/env python3
"""KernelTuner's search strategies, in its simulation mode, on recorded spaces in the T4 format:
the other side of `scripts/bench-search` (Shoal's side is `shoal-bench search`). Needs the
`kernel-tuner` package, 1.5.0 (scripts/bench-search installs it into a virtual environment).

Usage:
  bench_search_kerneltuner.py --space FILE [--space FILE ...] [--budget 5%] [--budget 200]
                              [--reps 100] [--strategies genetic_algorithm,mls,...] [--no-cache]
  bench_search_kerneltuner.py --seeds NAME [--reps N]   (the seeds of runs 1..N on a space NAME)

For each space, budget and strategy it prints the raw ratios of its runs 1..reps, in that order:
  kerneltuner-ratios space=<file name> budget=<b> evaluations=<n> strategy=<s> secs=<s>
                     ratios=<r1>,<r2>,...
A ratio is the best valid time a run found over the space's optimum (inf if it found none);
secs is the time the runs took when they were run (cached ones keep theirs). It computes no
figures: `shoal-bench search-summary` reads these lines with Shoal's (`shoal-bench search
--ratios`) and gives both sides' medians, shares within 2 % and their bootstrap intervals, one
implementation for both (scripts/bench-search pipes them there). Progress, and the runs that
stopped before the budget, are on stderr.

Seeds (run_seed): run r (1, 2, ...) on a space file named F (no directory) is seeded with
FNV-1a 64 of the UTF-8 text "F#r", reduced to 1..2**31-1 (1 + hash mod (2**31 - 1)), as Shoal's
side (run_seed in crates/shoal-bench/src/search.rs, whose tests run `--seeds` and compare). For
cuda_gemm_wide-1.T4.json.gz, runs 1, 2, 3: 1842351183, 1842354024, 1842353077. Seeds 1..N on
every space drew the same configurations on every space that lists them in the same order
(issue 38). Consecutive runs get nearby seeds (FNV's last step); every generator seeded here
scrambles its seed (MT19937's initialisation, Python's random.seed), so that does not matter.

Cache (cached_runs): a strategy's runs do not change when Shoal's do, so they are kept under
${XDG_CACHE_HOME:-~/.cache}/shoal/bench-search-kt/<SHA-256 of the space file>/<file name>/
<strategy>/evaluations<n>.<seed rule>.kt<version>.m<METHOD>.json, the key repeated inside and
checked: a file holds runs 1..m and serves any --reps up to m; asked for more, only the missing
runs are run and added. --no-cache runs them all anew and writes them over it. METHOD is to be
raised when this file changes how a run is run or scored.

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
- Each run seeds Python's `random` and NumPy's global generator with its seed (run_seed, as
  Shoal's side), passes it as tune_kernel's `seed`, and LatinHypercube (bayes_opt's initial
  sample and diff_evo's populations, which scipy would otherwise draw from fresh entropy) is
  given a generator drawn from NumPy's seeded one, so runs are repeatable.

Strategies of kernel_tuner 1.5.0 (its strategy_map) and the default set, DEFAULT_STRATEGIES:
those that run in simulation mode on both recorded spaces, in well under a second a run but
for basinhopping (up to 1 s) and hybrid_vndx (up to 15 s a run at 1,113 evaluations of the
dedispersion space); the whole set at 1, 2, 5 and 10 % over 10 seeds took about 1.5 minutes
on the convolution space and 5 on dedispersion (2 vCPU). Left out of the default (each still
runs with --strategies):
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
import hashlib
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


# The seed rule, the same as Shoal's side (run_seed in crates/shoal-bench/src/search.rs): run
# `rep` (1, 2, ...) on a space file named `name` is seeded with FNV-1a 64 of the UTF-8 text
# "<name>#<rep>", reduced to 1..2**31-1 (1 + hash mod (2**31 - 1)) so NumPy and KernelTuner
# take it. E.g. cuda_gemm_wide-1.T4.json.gz, runs 1, 2, 3: 1842351183, 1842354024, 1842353077
# (asserted by Shoal's tests, which also compare `--seeds NAME` with Shoal's own).
SEED_RULE = "fnv1a64-name-rep"
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def run_seed(name, rep):
    """The seed of run `rep` (1, 2, ...) on the space file `name` (no directory)."""
    return 1 + fnv1a64(f"{name}#{rep}".encode()) % (2**31 - 1)


# What the cache of runs (cached_runs) is keyed by besides the space, budget and strategy:
# KernelTuner's version, and METHOD, to be raised whenever this file changes how a run is run
# or scored (its runs cached before then are then run anew).
KERNEL_TUNER = "1.5.0"
METHOD = 1


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shoal", "bench-search-kt")


def rust_round(x):
    """Rust's f64::round for x >= 0: halves away from zero (Python's round() goes to even); for
    the budget's count, as Shoal's Budget::evaluations rounds it."""
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
        with open(path, "rb") as f:
            self.sha256 = hashlib.sha256(f.read()).hexdigest()
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


def cached_runs(space, strategy, n, reps, use_cache):
    """The runs of `strategy` at `n` evaluations for reps 1..reps: (ratio, used, secs) each,
    from the cache where it holds them (a cache file keeps the runs of reps 1..m and serves any
    reps <= m; asked for more, only the missing ones are run and the file is extended). With
    use_cache false all are run anew, and written over the cache."""
    path = os.path.join(
        cache_dir(),
        space.sha256,
        space.name,
        strategy,
        f"evaluations{n}.{SEED_RULE}.kt{KERNEL_TUNER}.m{METHOD}.json",
    )
    key = {
        "sha256": space.sha256,
        "space": space.name,
        "evaluations": n,
        "strategy": strategy,
        "seed_rule": SEED_RULE,
        "kernel_tuner": KERNEL_TUNER,
        "method": METHOD,
    }
    runs = []
    if use_cache:
        try:
            with open(path) as f:
                doc = json.load(f)
            if doc.get("key") == key:
                runs = [tuple(r) for r in doc["runs"]]
        except (OSError, ValueError, KeyError, TypeError):
            runs = []
    cached = min(len(runs), reps)
    if len(runs) < reps:
        for rep in range(len(runs) + 1, reps + 1):
            clock = time.perf_counter()
            best, used = run(space, strategy, run_seed(space.name, rep), n)
            runs.append((best / space.optimum, used, time.perf_counter() - clock))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"key": key, "runs": runs}, f)
        os.replace(tmp, path)
    return runs[:reps], cached


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", action="append", help="a T4 file (.json or .json.gz); repeatable")
    parser.add_argument("--budget", action="append", help="a count or a share such as 5%%; repeatable (default 1%% and 2%%)")
    parser.add_argument("--reps", type=int, default=100, help="runs per strategy, space and budget (default 100)")
    parser.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES), help="comma-separated KernelTuner strategies")
    parser.add_argument("--no-cache", action="store_true", help="run every run anew (and write them over the cache)")
    parser.add_argument("--seeds", metavar="NAME", help="only print the seeds of runs 1..reps on a space file of this name")
    args = parser.parse_args()
    if args.reps < 1:
        sys.exit("--reps: at least 1")
    if args.seeds is not None:
        print(" ".join(str(run_seed(args.seeds, rep)) for rep in range(1, args.reps + 1)))
        return
    if not args.space:
        parser.error("--space is required")
    budgets = args.budget or ["1%", "2%"]
    strategies = [s for s in args.strategies.split(",") if s]

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    seeded_latin_hypercube()
    with tempfile.TemporaryDirectory(prefix="bench-search-kt-") as workdir:
        for path in args.space:
            space = Space(path, workdir)
            clock_space = time.perf_counter()
            for budget in budgets:
                n = evaluations(budget, space.size)
                ran = 0
                for strategy in strategies:
                    clock = time.perf_counter()
                    try:
                        runs, cached = cached_runs(space, strategy, n, args.reps, not args.no_cache)
                    except Exception as e:  # a strategy that fails here is reported and skipped
                        print(f"kerneltuner: {space.name} budget={budget} {strategy}: failed: {e!r}", file=sys.stderr)
                        continue
                    ran += 1
                    ratios = ",".join(repr(r) for r, _, _ in runs)
                    secs = sum(s for _, _, s in runs)
                    print(
                        f"kerneltuner-ratios space={space.name} budget={budget} evaluations={n} strategy={strategy} "
                        f"secs={secs:.3f} ratios={ratios}",
                        flush=True,
                    )
                    print(
                        f"kerneltuner: {space.name} budget={budget} {strategy}: {len(runs)} runs, {cached} from the cache, "
                        f"{time.perf_counter() - clock:.1f} s now ({secs:.1f} s computing all)",
                        file=sys.stderr,
                        flush=True,
                    )
                    used = [u for _, u, _ in runs]
                    if max(used) > n:
                        print(f"kerneltuner: {space.name} budget={budget} {strategy}: used {max(used)} > {n} evaluations", file=sys.stderr)
                    if min(used) < n:
                        print(
                            f"kerneltuner: {space.name} budget={budget} {strategy}: used {sum(used) / len(used):.1f} "
                            f"of {n} evaluations on average (fewest {min(used)})",
                            file=sys.stderr,
                            flush=True,
                        )
                if ran == 0:
                    sys.exit(f"{space.name}: no strategy ran")
            print(f"kerneltuner: {space.name}: {time.perf_counter() - clock_space:.1f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

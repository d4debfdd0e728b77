#!/usr/bin/env bash
# Tunes a spec and keeps its tuned table only if the new one is no worse: the tuning pipeline of
# aiter's CI (check before, tune, diff, check after, gate, upload, write back), for Shoal.
#
# Usage: deploy/ci/tune-gate.sh SPEC TABLE_DIR [--work DIR] [--shoal PATH] [--no-retime]
#   SPEC       the tuning spec (every shape it names is tuned; to tune a subset, give a spec
#              whose shapes are that subset)
#   TABLE_DIR  where the kept table lives (tuned.csv and tuned.json, as `shoal export` writes
#              them), usually in the repository; empty or missing the first time
#   --work DIR where the run's files go (default: tune-gate-work): before/ (the table as it
#              was), new/ (this tuning's), kept/ (per shape the better winner), tune.db (the
#              store, every candidate's time), diff.txt, compare.txt: upload them as artifacts
#   --shoal    the shoal binary (default: shoal on PATH)
#   --no-retime judge from the times recorded in the two tables, against each winner's recorded
#              spread, instead of building both winners with SPEC and timing them side by side
#              (`shoal compare --retime`): for a spec that replays a recorded space or runs in
#              library mode, which --retime does not time
# Steps:
#   1. before: the kept table's winners (`shoal compare` of the table with itself), saved;
#   2. tune SPEC into a fresh store;
#   3. show the diff of the old and new tuned.csv;
#   4. after: `shoal compare` of the kept table and the new one, shape by shape: both winners
#      built from SPEC and timed in alternation on this machine, so that load on a shared CI
#      runner falls on both alike (`--retime`), and a change counts only beyond the rounds'
#      99 % interval. Both are built from SPEC, today's code: the gate judges the two tables'
#      choices, as aiter's before/after check does (whether the code itself got slower is
#      for `shoal compare OLD_SESSION NEW_SESSION --retime`, each side built from its own);
#   5. gate: a regression (a shape slower beyond the noise, or without a winner) fails the run
#      and leaves TABLE_DIR as it was; otherwise, when a shape improved (or there was no table
#      yet), TABLE_DIR gets the better winner of each shape.
# Exit status: 0 no regression (the table written back when improved), 1 a regression, 2 a
# usage or input error (as `shoal compare`), 3 a shape with no valid candidate (as `shoal tune`).
# The last line says what happened: `tune-gate: kept|improved|regressed …`.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "tune-gate: $*" >&2; exit 2; }

spec="" table="" work="tune-gate-work" shoal="shoal" retime=1
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    --shoal) shoal=${2:?--shoal needs a path}; shift 2 ;;
    --no-retime) retime=0; shift ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *)
        if [ -z "$spec" ]; then spec=$1
        elif [ -z "$table" ]; then table=$1
        else die "one SPEC and one TABLE_DIR, not also '$1'"
        fi
        shift ;;
    esac
done
[ -n "$spec" ] && [ -n "$table" ] || { usage >&2; exit 2; }
[ -f "$spec" ] || die "$spec: no such spec"
command -v "$shoal" >/dev/null 2>&1 || [ -x "$shoal" ] || die "$shoal: not found (--shoal PATH)"

rm -rf "$work"
mkdir -p "$work/before"
had_table=0
if [ -f "$table/tuned.json" ]; then
    had_table=1
    cp "$table/tuned.json" "$work/before/"
    [ -f "$table/tuned.csv" ] && cp "$table/tuned.csv" "$work/before/"
    echo "== before: the kept table ($table)"
    "$shoal" compare "$work/before" "$work/before" | tee "$work/before.txt"
else
    echo "== before: no table in $table yet"
fi

echo "== tune $spec"
set +e
"$shoal" --db "$work/tune.db" tune "$spec" --out "$work/new"
rc=$?
set -e
if [ $rc -ne 0 ]; then
    echo "tune-gate: tuning failed (exit $rc); $table left as it was"
    exit "$rc"
fi

echo "== diff of tuned.csv"
if [ $had_table -eq 1 ] && [ -f "$work/before/tuned.csv" ]; then
    diff -u "$work/before/tuned.csv" "$work/new/tuned.csv" >"$work/diff.txt" || true
else
    diff -u /dev/null "$work/new/tuned.csv" >"$work/diff.txt" || true
fi
cat "$work/diff.txt"

if [ $had_table -eq 0 ]; then
    mkdir -p "$table"
    cp "$work/new/tuned.csv" "$work/new/tuned.json" "$table/"
    echo "tune-gate: improved: first table written to $table"
    exit 0
fi

echo "== after: compare the kept table with the new one"
set +e
retime_args=()
[ $retime -eq 1 ] && retime_args=(--retime --spec "$spec")
"$shoal" compare "$work/before" "$work/new" "${retime_args[@]}" --update-if-improved "$work/kept" --force | tee "$work/compare.txt"
rc=${PIPESTATUS[0]}
set -e
case $rc in
0) ;;
1) echo "tune-gate: regressed: $table left as it was (see $work/compare.txt)"; exit 1 ;;
*) echo "tune-gate: could not compare (exit $rc); $table left as it was"; exit "$rc" ;;
esac
improved=$(sed -n 's/^compare .* improved=\([0-9]*\) .*/\1/p' "$work/compare.txt")
added=$(sed -n 's/^compare .* added=\([0-9]*\).*/\1/p' "$work/compare.txt")
if [ "${improved:-0}" -gt 0 ] || [ "${added:-0}" -gt 0 ]; then
    cp "$work/kept/tuned.csv" "$work/kept/tuned.json" "$table/"
    echo "tune-gate: improved: ${improved:-0} shapes faster, ${added:-0} new; $table written"
else
    echo "tune-gate: kept: no shape changed beyond the noise; $table left as it was"
fi

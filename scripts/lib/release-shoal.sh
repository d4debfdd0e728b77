# shellcheck shell=bash
# shoal_release_binary: builds the release `shoal` of this checkout and prints its absolute path,
# under $CARGO_TARGET_DIR when set (else target/). Run from the repository root; the benchmark
# scripts use it so that each one times the binary of the tree it is in.
shoal_release_binary() {
    cargo build --release --locked -q -p shoal-cli
    printf '%s\n' "$(shoal_release_dir)/shoal"
}

# shoal_release_bench_binary: the same for the developers' `shoal-bench` (not shipped to users:
# the benchmarks and the hostile publisher), built together with the `shoal` beside it whose
# `shoal worker` processes its clusters start; prints shoal-bench's absolute path.
shoal_release_bench_binary() {
    cargo build --release --locked -q -p shoal-cli -p shoal-bench
    printf '%s\n' "$(shoal_release_dir)/shoal-bench"
}

# shoal_release_dir: the absolute path of the release build's directory.
shoal_release_dir() {
    local target_dir=${CARGO_TARGET_DIR:-target}
    case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
    printf '%s\n' "$target_dir/release"
}

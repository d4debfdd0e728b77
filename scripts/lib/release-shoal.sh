# shellcheck shell=bash
# shoal_release_binary: builds the release `shoal` of this checkout and prints its absolute path,
# under $CARGO_TARGET_DIR when set (else target/). Run from the repository root; the benchmark
# scripts use it so that each one times the binary of the tree it is in.
shoal_release_binary() {
    cargo build --release --locked -q -p shoal-cli
    local target_dir=${CARGO_TARGET_DIR:-target}
    case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
    printf '%s\n' "$target_dir/release/shoal"
}

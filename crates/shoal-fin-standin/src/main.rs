//! `fin` — Shoal's TEST DOUBLE of MIOpen's tuning handle (see the crate docs and `fin --help`).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(shoal_fin_standin::run(&args));
}

//! `cargo xtask test | bench | vm-test | docker-test | man | bwrap-test | wheel | dist`: the project's own tasks.

mod bench;
mod bench_egress;
mod bench_serve;
mod binaries;
mod bwrap_test;
mod dist;
mod docker;
mod docker_bwrap;
mod docker_compose;
mod docker_fallback;
mod json;
mod logs;
mod man;
mod tally;
mod test;
mod vm;
mod vm_bench;
mod vm_systemd;
mod wheel;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("test") => test::main(&args[1..]),
        Some("bench") => bench::main(&args[1..]),
        Some("vm-test") => vm::main(&args[1..]),
        Some("vm-bench") => vm_bench::main(&args[1..]),
        Some("vm-systemd-test") => vm_systemd::main(&args[1..]),
        Some("docker-test") => docker::main(&args[1..]),
        Some("man") => man::main(&args[1..]),
        Some("bwrap-test") => bwrap_test::main(&args[1..]),
        Some("wheel") => wheel::main(&args[1..]),
        Some("dist") => dist::main(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <test|bench|vm-test|vm-bench|vm-systemd-test|docker-test|man|bwrap-test|wheel|dist>\n  test [--cargo-only]  every test: cargo tests (as root and uid 65534), the VM cgroup tests, the Docker tests; prints a summary\n  bench    start-up and syscall cost beside bare exec, bwrap and firejail\n  bench serve  a Python evaluator through stockade serve (with and without a warm pool) beside python3 and stockade run: latency, throughput, leaks\n  bench egress  the latency the egress proxy adds to a secret's host and to an allowed one, beside no proxy\n  vm-test  the cgroup tests inside a small VM (a cgroup v2 boot, then a cgroup v1 boot)\n  vm-bench  bench serve inside the cgroup v2 VM (ratios only: the VM is emulated)\n  vm-systemd-test  the systemd rung against a real systemd --user, inside a small VM\n  docker-test  the container tests under a real Docker engine\n  man      the man pages and completion scripts, into target/man\n  bwrap-test  bubblewrap's own test suite (Debian trixie source) against the real bwrap and stockade bwrap\n  wheel    the Python package with the static binary, into target/wheels (pip install it: nothing to build)\n  dist [--no-image]  the static binary, the wheel, man pages, completions, a FROM scratch image tarball and SHA256SUMS, into target/dist");
            2
        }
    };
    std::process::exit(code);
}

fn main() {
    eprintln!("xtask: usage: cargo xtask <ci|bench|vm-test>");
    std::process::exit(2);
}

//! Tells the crates built on this one where its sources are
//! (`DEP_STOCKADE_SYS_ROOT`, through `links`): the stockade crate's build
//! script builds the fork server's confinement library from them when it
//! is built from its published package, away from this workspace.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    println!("cargo::metadata=root={dir}");
}

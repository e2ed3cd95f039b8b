//! cargo xtask bench

pub fn main(_args: &[String]) -> i32 {
    eprintln!("xtask bench: not written yet");
    1
}

//! cargo xtask test

pub fn main(_args: &[String]) -> i32 {
    eprintln!("xtask test: not written yet");
    1
}

//! cargo xtask vm

pub fn main(_args: &[String]) -> i32 {
    eprintln!("xtask vm: not written yet");
    1
}

//! cargo xtask docker-test (being written).

pub fn main(_args: &[String]) -> i32 {
    println!("DOCKERTEST FAIL suite: not written yet");
    1
}

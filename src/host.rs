//! What stockade learns from the host before a policy is built, above
//! `policy`, which holds only the values: the Python interpreter
//! ([`python`]: found, asked about itself, its answer cached; whether the
//! jail's uid can run it).

#![deny(unsafe_code)]

pub mod python;

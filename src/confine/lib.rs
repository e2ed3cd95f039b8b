//! The fork server's children's confinement, as the shared library the
//! zygote loads (`serve/zygote.py`): stockade-sys's `forked` steps, the
//! same code every other launcher's jail runs, behind the C ABI of
//! `stockade_sys::forked::abi` (integers only). Built by the stockade
//! crate's build script and carried inside the stockade binary
//! (`jail::zygote::LIBRARY`), which hands it to the zygote as a memfd.

pub use stockade_sys::forked::abi::*;

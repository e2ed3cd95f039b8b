//! Raw kernel calls for the seccomp layer (the only unsafe code for it).

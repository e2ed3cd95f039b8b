//! Raw kernel calls for the cgroup layer (the only unsafe code for it).

//! Raw kernel calls for the landlock layer (the only unsafe code for it).

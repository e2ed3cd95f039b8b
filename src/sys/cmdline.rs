//! What /proc/PID/cmdline shows: the argv string area, found before clone
//! and overwritten in the jail's init.

/// Where the kernel put our argument strings: `[start, end)`, found from
/// argv when the program starts (glibc, see `ARGV_RANGE_INIT`) or from
/// /proc before clone ([`record_argv_range_from_proc`]); 0 if unknown.
static ARGV_START: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static ARGV_END: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(target_env = "gnu")]
extern "C" fn record_argv_range(
    argc: libc::c_int,
    argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    if argc < 1 || argv.is_null() {
        return;
    }
    // SAFETY: glibc calls .init_array functions with the process's own
    // argc and argv: argc valid pointers to NUL-terminated strings, which
    // the kernel laid out one after another on the initial stack.
    unsafe {
        let first = *argv;
        let last = *argv.add(argc as usize - 1);
        if first.is_null() || last.is_null() {
            return;
        }
        let end = last as usize + libc::strlen(last) + 1;
        ARGV_START.store(first as usize, std::sync::atomic::Ordering::Relaxed);
        ARGV_END.store(end, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs before main, as the standard library's own argument capture does
/// on glibc (which, unlike musl, passes argc, argv and envp to these
/// functions); it only reads argv and stores two integers.
#[cfg(target_env = "gnu")]
#[used]
#[link_section = ".init_array"]
static ARGV_RANGE_INIT: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = record_argv_range;

/// Make sure the argv string area is known before clone: recorded before
/// main (glibc), or else read from /proc/self/stat (fields 48 and 49,
/// arg_start and arg_end) here, so init does not read it between clone
/// and the payload's execve.
pub fn record_argv_range_from_proc() {
    if ARGV_START.load(std::sync::atomic::Ordering::Relaxed) != 0 {
        return;
    }
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
        return;
    };
    let mut f = rest.split(' ').skip(45);
    if let (Some(a), Some(b)) = (
        f.next().and_then(|v| v.parse().ok()),
        f.next().and_then(|v| v.parse().ok()),
    ) {
        ARGV_END.store(b, std::sync::atomic::Ordering::Relaxed);
        ARGV_START.store(a, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Replace what /proc/self/cmdline shows with `name`: the jail's init is a
/// clone of the supervisor, whose command line names host paths the payload
/// must not learn. Best effort: on any doubt it leaves the area as it is.
pub fn scrub_cmdline(name: &[u8]) {
    let start = ARGV_START.load(std::sync::atomic::Ordering::Relaxed);
    let end = ARGV_END.load(std::sync::atomic::Ordering::Relaxed);
    if start == 0 || end <= start || end - start > 1 << 20 || name.len() >= end - start {
        return;
    }
    // SAFETY: [start, end) is this process's own argv string area (from
    // argv before main, or the kernel's arg_start/arg_end), mapped and
    // writable on the initial stack.
    // Only the C strings are overwritten, never the argv pointer array;
    // after clone, nothing in this process reads the arguments again (the
    // CLI parsed them before), and the supervisor's copy is a separate
    // copy-on-write page.
    unsafe {
        let p = start as *mut u8;
        std::ptr::write_bytes(p, 0, end - start);
        std::ptr::copy_nonoverlapping(name.as_ptr(), p, name.len());
    }
}

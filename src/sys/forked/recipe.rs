//! What a zygote's children are handed: the [`Recipe`] the zygote's jail
//! writes once on the hand-off pipe (the layers each child applies, as
//! that jail decided them), and each child's [`Go`] from the server, read
//! first on its stdin. Both are byte records of their own, little-endian.

use std::ffi::OsStr;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::failure::bad;
use crate::SysResult;

/// What each child of a zygote applies, as its jail decided it.
#[derive(Clone, Default)]
pub struct Recipe {
    /// The size of each tmpfs the child mounts (/tmp, the workdir,
    /// /dev/shm), bytes.
    pub tmp_size: u64,
    /// The workdir's owner.
    pub uid: u32,
    pub gid: u32,
    /// The workdir, a fresh tmpfs per child; the child's cwd.
    pub workdir: PathBuf,
    /// The Landlock ruleset each child makes and enforces; None: none.
    pub landlock: Option<Ruleset>,
    /// stockade's seccomp program, installed last; empty: none.
    pub seccomp: Vec<libc::sock_filter>,
    /// The same program with its refusals sent to a listener, which the
    /// child passes to the server (errno mode's records, kill mode's
    /// verdict); empty: the filter judges alone.
    pub seccomp_notify: Vec<libc::sock_filter>,
    /// The records of the layers each child applies (the report pipe's
    /// encoding), passed on to the server as they are.
    pub layers: Vec<u8>,
}

/// A Landlock ruleset as the kernel takes it: the handled rights and
/// scopes (only bits the running kernel knows) and each rule.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ruleset {
    pub fs: u64,
    pub net: u64,
    pub scoped: u64,
    /// `(access, path)`: the fs rights granted beneath each path.
    pub rules: Vec<(u64, PathBuf)>,
}

const MAGIC: &[u8; 4] = b"SKZ1";

impl Recipe {
    /// The recipe as bytes, for the hand-off pipe.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(self.tmp_size.to_le_bytes());
        b.extend(self.uid.to_le_bytes());
        b.extend(self.gid.to_le_bytes());
        put(&mut b, self.workdir.as_os_str().as_bytes());
        match &self.landlock {
            None => b.push(0),
            Some(r) => {
                b.push(1);
                for v in [r.fs, r.net, r.scoped] {
                    b.extend(v.to_le_bytes());
                }
                b.extend((r.rules.len() as u32).to_le_bytes());
                for (access, path) in &r.rules {
                    b.extend(access.to_le_bytes());
                    put(&mut b, path.as_os_str().as_bytes());
                }
            }
        }
        put_program(&mut b, &self.seccomp);
        put_program(&mut b, &self.seccomp_notify);
        put(&mut b, &self.layers);
        b
    }

    /// [`Recipe::encode`]'s bytes read back; None for anything else.
    pub fn decode(bytes: &[u8]) -> Option<Recipe> {
        let mut r = Reader(bytes);
        if r.take(4)? != MAGIC {
            return None;
        }
        let tmp_size = r.u64()?;
        let (uid, gid) = (r.u32()?, r.u32()?);
        let workdir = r.path()?;
        let landlock = match r.take(1)?[0] {
            0 => None,
            1 => {
                let (fs, net, scoped) = (r.u64()?, r.u64()?, r.u64()?);
                let n = r.u32()? as usize;
                let mut rules = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    rules.push((r.u64()?, r.path()?));
                }
                Some(Ruleset {
                    fs,
                    net,
                    scoped,
                    rules,
                })
            }
            _ => return None,
        };
        let seccomp = r.program()?;
        let seccomp_notify = r.program()?;
        let layers = r.bytes()?.to_vec();
        r.0.is_empty().then_some(Recipe {
            tmp_size,
            uid,
            gid,
            workdir,
            landlock,
            seccomp,
            seccomp_notify,
            layers,
        })
    }
}

fn put_program(b: &mut Vec<u8>, p: &[libc::sock_filter]) {
    b.extend((p.len() as u32).to_le_bytes());
    for i in p {
        b.extend(i.code.to_le_bytes());
        b.extend([i.jt, i.jf]);
        b.extend(i.k.to_le_bytes());
    }
}

fn put(b: &mut Vec<u8>, data: &[u8]) {
    b.extend((data.len() as u32).to_le_bytes());
    b.extend(data);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn program(&mut self) -> Option<Vec<libc::sock_filter>> {
        let n = self.u32()? as usize;
        let mut p = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let i = self.take(8)?;
            p.push(libc::sock_filter {
                code: u16::from_le_bytes([i[0], i[1]]),
                jt: i[2],
                jf: i[3],
                k: u32::from_le_bytes([i[4], i[5], i[6], i[7]]),
            });
        }
        Some(p)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn path(&mut self) -> Option<PathBuf> {
        let b = self.bytes()?;
        (!b.contains(&0)).then(|| PathBuf::from(OsStr::from_bytes(b)))
    }
}

/// What the server writes first on a child's stdin once the child is in its
/// run's cgroup: `G`, then the run's /tmp (and /dev/shm) size and its
/// workdir's size, each a little-endian u64 (0: the recipe's size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Go {
    pub tmp_size: u64,
    pub workdir_size: u64,
}

impl Go {
    pub const LEN: usize = 17;

    pub fn encode(&self) -> [u8; Go::LEN] {
        let mut b = [0u8; Go::LEN];
        b[0] = b'G';
        b[1..9].copy_from_slice(&self.tmp_size.to_le_bytes());
        b[9..17].copy_from_slice(&self.workdir_size.to_le_bytes());
        b
    }

    /// Read one from `fd`, exactly its length (what follows is the
    /// payload's).
    pub(super) fn read(fd: RawFd) -> SysResult<Go> {
        let mut b = [0u8; Go::LEN];
        let mut got = 0;
        while got < Go::LEN {
            match crate::read(fd, &mut b[got..])? {
                0 => return Err(bad("no go from the server")),
                n => got += n,
            }
        }
        if b[0] != b'G' {
            return Err(bad("no go from the server"));
        }
        let word = |r: &[u8]| u64::from_le_bytes(r.try_into().unwrap_or_default());
        Ok(Go {
            tmp_size: word(&b[1..9]),
            workdir_size: word(&b[9..17]),
        })
    }
}

/// The most a hand-off may hold.
pub const HANDOFF_MAX: usize = 60 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_reads_back_as_it_was_written() {
        let r = Recipe {
            tmp_size: 64 << 20,
            uid: 65534,
            gid: 65534,
            workdir: "/work".into(),
            landlock: Some(Ruleset {
                fs: 0xffff,
                net: 3,
                scoped: 2,
                rules: vec![(7, "/usr".into()), (0x1fff, "/tmp".into())],
            }),
            seccomp: vec![libc::sock_filter {
                code: 6,
                jt: 1,
                jf: 2,
                k: 0x7fff0000,
            }],
            seccomp_notify: vec![libc::sock_filter {
                code: 6,
                jt: 0,
                jf: 0,
                k: 0x7fc00000,
            }],
            layers: b"L{}".to_vec(),
        };
        let b = r.encode();
        let back = Recipe::decode(&b).expect("read back");
        assert_eq!(back.landlock, r.landlock);
        assert_eq!(
            (back.tmp_size, back.uid, back.workdir.clone()),
            (64 << 20, 65534, "/work".into())
        );
        assert_eq!(back.encode(), b);
        for cut in 0..b.len() {
            assert!(Recipe::decode(&b[..cut]).is_none(), "cut at {cut}");
        }
        let mut more = b.clone();
        more.push(0);
        assert!(Recipe::decode(&more).is_none(), "trailing bytes");
        let none = Recipe {
            landlock: None,
            seccomp: Vec::new(),
            ..r
        };
        assert_eq!(
            Recipe::decode(&none.encode()).map(|r| r.encode()),
            Some(none.encode())
        );
    }
}

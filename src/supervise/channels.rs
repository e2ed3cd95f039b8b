//! The channels between the supervisor and the jail, opened before clone:
//! the control socket (GO, forwarded signals, kill; the network namespace's
//! fd), the report pipe (the jail's records), the output pipes, and the
//! signalfd of the signals the supervisor forwards; the payload's hello
//! socket (`supervise::childpid`); the overlays' socket (init hands their
//! upper directories over it: `supervise::workspace`). After clone each side
//! keeps its own ends.

#![deny(unsafe_code)]

use std::os::fd::OwnedFd;

use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;

use crate::jail;
use crate::plan::{Plan, SetupError};
use crate::sys;

/// Both ends of every channel, between open and clone.
pub(super) struct Channels {
    /// The control socket: (init's end, ours). A socket, not a pipe: it
    /// also carries the network namespace's fd.
    ctl: (OwnedFd, OwnedFd),
    /// The report pipe: (our read end, init's write end).
    rep: (OwnedFd, OwnedFd),
    /// stdout and stderr pipes, when output goes through the supervisor.
    out: Option<(OwnedFd, OwnedFd)>,
    err: Option<(OwnedFd, OwnedFd)>,
    sfd: SignalFd,
    /// The payload's hello socket (`supervise::childpid`): (the jail's
    /// end, ours, with SO_PASSCRED), when the plan has one.
    hello: Option<(OwnedFd, OwnedFd)>,
    /// Where init hands the overlays' upper directories (on their tmpfs)
    /// once the root is built (`supervise::workspace`): (init's end,
    /// ours), when the plan has such overlays.
    uppers: Option<(OwnedFd, OwnedFd)>,
}

/// The supervisor's ends, after clone.
pub(super) struct Ours {
    pub(super) ctl: OwnedFd,
    pub(super) rep: OwnedFd,
    pub(super) out: Option<OwnedFd>,
    pub(super) err: Option<OwnedFd>,
    pub(super) sfd: SignalFd,
    pub(super) hello: Option<OwnedFd>,
    pub(super) uppers: Option<OwnedFd>,
}

impl Channels {
    /// Open them all. The signals we forward are blocked first, so none
    /// of them can kill us between clone and the wait (the payload
    /// unblocks them).
    pub(super) fn open(plan: &Plan) -> Result<Channels, SetupError> {
        let ctl = sys::fdpass::socketpair(libc::SOCK_STREAM)
            .map_err(|e| SetupError::sys("socketpair", "", &e))?;
        let pipe = || sys::pipe().map_err(|e| SetupError::sys("pipe", "", &e));
        let rep = pipe()?;
        let (out, err) = if plan.channels.pipe_output {
            (Some(pipe()?), Some(pipe()?))
        } else {
            (None, None)
        };
        let sfd = sys::signalfd_for(&[
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ])
        .map_err(|e| SetupError::sys("signalfd", "", &e))?;
        let hello = match plan.payload_hello() {
            true => {
                let (jail, ours) = sys::fdpass::socketpair(libc::SOCK_STREAM)
                    .map_err(|e| SetupError::sys("socketpair", "", &e))?;
                sys::fdpass::set_passcred(&ours)
                    .map_err(|e| SetupError::sys("socketpair", "", &e))?;
                Some((jail, ours))
            }
            false => None,
        };
        let handed = plan
            .root
            .workspaces
            .list
            .iter()
            .any(|w| w.upper == crate::plan::Upper::Handed);
        let uppers = match handed {
            true => Some(
                sys::fdpass::socketpair(libc::SOCK_SEQPACKET)
                    .map_err(|e| SetupError::sys("socketpair", "", &e))?,
            ),
            false => None,
        };
        Ok(Channels {
            ctl,
            rep,
            out,
            err,
            sfd,
            hello,
            uppers,
        })
    }

    /// In the cloned child: keep init's ends, run init with `trees` (see
    /// `supervise::idmap`). Never returns.
    /// `held`: what only the supervisor keeps (the secrets' fds), closed
    /// here first.
    pub(super) fn enter_jail(
        self,
        plan: &Plan,
        trees: Vec<Option<jail::rootfs::Idmapped>>,
        held: Option<crate::plan::secrets::Held>,
    ) -> ! {
        drop(held);
        let Channels {
            ctl: (ctl_rd, ctl_wr),
            rep: (rep_rd, rep_wr),
            out,
            err,
            sfd,
            hello,
            uppers,
        } = self;
        drop(sfd);
        drop(ctl_wr);
        drop(rep_rd);
        let hello = hello.map(|(jail, _ours)| jail);
        let uppers = uppers.map(|(jail, _ours)| jail);
        let stdio = match (out, err) {
            (Some((r1, w1)), Some((r2, w2))) => {
                drop(r1);
                drop(r2);
                Some((w1, w2))
            }
            _ => None,
        };
        jail::init::main(plan, ctl_rd, rep_wr, stdio, trees, hello, uppers)
    }

    /// In the supervisor: close init's ends (so their end is seen when
    /// the jail is gone), keep ours.
    pub(super) fn ours(self) -> Ours {
        let Channels {
            ctl: (ctl_rd, ctl_wr),
            rep: (rep_rd, rep_wr),
            out,
            err,
            sfd,
            hello,
            uppers,
        } = self;
        drop(ctl_rd);
        drop(rep_wr);
        Ours {
            ctl: ctl_wr,
            rep: rep_rd,
            out: out.map(|(r, _w)| r),
            err: err.map(|(r, _w)| r),
            sfd,
            hello: hello.map(|(_jail, ours)| ours),
            uppers: uppers.map(|(_jail, ours)| ours),
        }
    }
}

//! Command lines that must do what they say: binds of the directory the
//! jail's root is assembled in, the JSON outcome on every error, no
//! subcommand, shell completions and the man page. As root and as uid 65534.

mod common;

use common::{stderr, stdout, Scratch};

#[test]
fn binding_the_directory_that_holds_the_new_root_shows_the_host_directory() {
    // The jail's root is assembled on /tmp (in the jail's own mount
    // namespace): a bind of /tmp, or of /, must still show the host's /tmp.
    let dir = Scratch::new("bind-base");
    let marker = format!("host-file-{}", std::process::id());
    std::fs::write(dir.join("marker"), &marker).unwrap();
    let file = dir.join("marker");
    let file = file.to_str().unwrap();
    for who in
        common::users("binding_the_directory_that_holds_the_new_root_shows_the_host_directory")
    {
        for (flags, inner) in [
            (vec!["--ro-bind", "/tmp"], file.to_string()),
            (vec!["--bind", "/tmp"], file.to_string()),
            (vec!["--ro-bind", "/:/host"], format!("/host{file}")),
        ] {
            let o = common::run(who, &flags, &["/bin/cat", &inner]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{who:?}: {flags:?}: {}",
                stderr(&o)
            );
            assert_eq!(stdout(&o), marker, "{who:?}: {flags:?}");
        }
    }
}

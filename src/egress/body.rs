//! Request bodies that get a secret's value too (`--secret-body`): a
//! request to a secret's host whose `Content-Type` is one the secret
//! names, with no `Content-Encoding`, is read whole (at most
//! [`MAX_BODY`] bytes) before it is sent, each bound placeholder
//! replaced, and sent with its new length, over HTTP/1.1 and HTTP/2
//! alike. A larger one is refused (413, recorded) rather than passed on
//! with the placeholder in it: the host would take it for a wrong
//! credential, and the jail would never learn why. Bodies of other types
//! stream through untouched.

use tokio::sync::{Semaphore, SemaphorePermit};
use zeroize::Zeroizing;

use super::intercept::Swap;

/// The largest body read whole.
pub const MAX_BODY: usize = 4 << 20;

/// Bodies read whole at once, over the proxy's connections: the memory
/// they hold is at most this many times [`MAX_BODY`]; more wait.
const AT_ONCE: usize = 16;

/// The budget of bodies read whole at once.
pub struct Budget(Semaphore);

impl Default for Budget {
    fn default() -> Budget {
        Budget(Semaphore::new(AT_ONCE))
    }
}

impl Budget {
    /// A turn to hold one body.
    pub async fn turn(&self) -> Option<SemaphorePermit<'_>> {
        self.0.acquire().await.ok()
    }
}

/// The media type of a `Content-Type` value: `type/subtype`, lower case,
/// without its parameters.
pub fn media_type(v: &[u8]) -> String {
    let t = v.split(|b| *b == b';').next().unwrap_or_default();
    String::from_utf8_lossy(t).trim().to_ascii_lowercase()
}

/// Whether a `Content-Encoding` value leaves the body as it is: a
/// compressed body is passed on untouched (its bytes are not the text).
pub fn identity(encoding: Option<&[u8]>) -> bool {
    encoding.is_none_or(|e| {
        e.split(|b| *b == b',')
            .all(|c| super::http1::trim(c).eq_ignore_ascii_case(b"identity"))
    })
}

/// Why a body is refused for its size.
pub fn too_large(media: &str) -> String {
    format!(
        "a body of type {media} larger than {} MiB: a secret's value goes into such bodies (--secret-body), which are read whole, up to that size",
        MAX_BODY >> 20
    )
}

/// `from` with each placeholder of `swaps` replaced by its value.
pub fn substitute(from: &[u8], swaps: &[Swap<'_>]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(from.len()));
    replace_into(&mut out, from, swaps);
    out
}

/// `from` into `out`, each placeholder of `swaps` replaced by its value.
pub fn replace_into(out: &mut Vec<u8>, from: &[u8], swaps: &[Swap<'_>]) {
    let mut i = 0;
    'at: while i < from.len() {
        for s in swaps {
            if from[i..].starts_with(s.placeholder) {
                out.extend_from_slice(s.value);
                i += s.placeholder.len();
                continue 'at;
            }
        }
        out.push(from[i]);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_and_encodings_are_read_as_a_server_would() {
        assert_eq!(
            media_type(b" Application/JSON ; charset=utf-8"),
            "application/json"
        );
        assert_eq!(media_type(b"text/plain"), "text/plain");
        assert!(identity(None) && identity(Some(b"identity")));
        assert!(!identity(Some(b"gzip")) && !identity(Some(b"identity, br")));
    }

    #[test]
    fn placeholders_become_values_of_any_length() {
        let swaps = [Swap {
            placeholder: b"sk-PLACEHOLDER0000000",
            value: b"sk-v",
        }];
        let b = substitute(
            br#"{"key":"sk-PLACEHOLDER0000000","k2":"sk-PLACEHOLDER0000000x"}"#,
            &swaps,
        );
        assert_eq!(&b[..], br#"{"key":"sk-v","k2":"sk-vx"}"#);
        assert_eq!(&substitute(b"nothing", &swaps)[..], b"nothing");
    }
}

//! From the cluster token to keys: one slow, memory-hard derivation per
//! process, then cheap labelled sub-keys.
//!
//! `master = Argon2id(token, salt = SHA-256("meshwork kdf salt v1"))` with
//! 32 MiB of memory and 3 passes (about a tenth of a second on one core),
//! computed once per process and token and cached. Every key the job uses
//! — the link handshake's, the seed's, discovery's and its job id, the
//! QUIC CA's seed — is `HMAC-SHA256(master, label)` with a distinct label.
//! Whatever an attacker records or provokes (a handshake, an announcement,
//! a server certificate) can only be checked against a guess of the token
//! by paying the Argon2id cost for that guess; a table built against
//! meshwork's salt serves meshwork alone.
//!
//! The salt names meshwork, not the job: everything a job could add (its
//! world size, its ports) is also what two of its ranks may have been
//! given differently by mistake, and that mistake must stay a typed error
//! at once (`WorldMismatch`) rather than look like another token.
//!
//! Tokens shorter than [`MIN_TOKEN_BYTES`] are refused: the KDF slows
//! guessing, it does not make a short word safe. `meshrun token` prints a
//! fresh random one.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The shortest cluster token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Argon2id's memory in KiB, passes and lanes.
const MEMORY_KIB: u32 = 32 * 1024;
const PASSES: u32 = 3;
const LANES: u32 = 1;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    #[error(
        "CLUSTER_TOKEN is {len} bytes; at least {MIN_TOKEN_BYTES} are required \
         (`meshrun token` prints a random one)"
    )]
    TooShort { len: usize },
}

/// Refuse a token too short to resist guessing.
pub fn check_token(token: &str) -> Result<(), TokenError> {
    match token.len() {
        len if len < MIN_TOKEN_BYTES => Err(TokenError::TooShort { len }),
        _ => Ok(()),
    }
}

/// A fresh random token: 32 random bytes, hex (64 characters).
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(hex(&bytes))
}

type Cache = Mutex<HashMap<[u8; 32], [u8; 32]>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// What the cache knows a token by: a hash of it, never the token.
fn token_id(token: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"meshwork kdf cache\0")
        .chain_update(token.as_bytes())
        .finalize()
        .into()
}

/// The master key for `token` (Argon2id, cached per process; the cache is
/// keyed by a hash of the token, never the token).
fn master(token: &str) -> [u8; 32] {
    let id = token_id(token);
    let mut held = cache().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = held.get(&id) {
        return *k;
    }
    // Derive under the lock: ranks of one process asking at once pay once.
    let key = argon2id(token.as_bytes());
    held.insert(id, key);
    key
}

/// `token`'s master key, written for a launcher to hand to the processes
/// it starts (`CLUSTER_TOKEN_KEY`): the first 8 bytes of the token's id,
/// then the key, in hex, `id:key`. A launcher that starts a thousand
/// ranks on one host pays the slow derivation once instead of a thousand
/// times. The key opens everything the token does within meshwork, and is
/// kept as the token is (a child's environment is readable by its owner
/// only), but it does not give the token back.
pub fn derived_key(token: &str) -> String {
    let id = token_id(token);
    format!("{}:{}", hex(&id[..8]), hex(&master(token)))
}

/// Take `token`'s master key from a launcher ([`derived_key`]'s text)
/// instead of deriving it. Returns false, and takes nothing, when the text
/// is not a key or is another token's: the derivation then runs as usual.
pub fn adopt_derived_key(token: &str, text: &str) -> bool {
    let id = token_id(token);
    let Some((given_id, key)) = text.trim().split_once(':') else {
        return false;
    };
    let (Some(given_id), Some(key)) = (unhex(given_id), unhex(key)) else {
        return false;
    };
    let Ok(key) = <[u8; 32]>::try_from(key.as_slice()) else {
        return false;
    };
    if given_id != id[..8] {
        return false;
    }
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(id)
        .or_insert(key);
    true
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

fn argon2id(token: &[u8]) -> [u8; 32] {
    let salt: [u8; 32] = Sha256::digest(b"meshwork kdf salt v1\0").into();
    let params = argon2::Params::new(MEMORY_KIB, PASSES, LANES, Some(32))
        .expect("the Argon2 parameters are constants within its bounds");
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = [0u8; 32];
    argon
        .hash_password_into(token, &salt, &mut out)
        .expect("a non-empty salt of 32 bytes and a 32-byte output are valid");
    out
}

/// `HMAC-SHA256(master(token), label)`: the key for one purpose.
pub fn subkey(token: &str, label: &str) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(&master(token)).expect("HMAC takes any key length");
    mac.update(b"meshwork subkey\0");
    mac.update(label.as_bytes());
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launcher's derived key is taken for its own token only (a key
    /// for another token, or garbage, is ignored) and then stands for the
    /// derivation; `derived_key` writes what the process derived.
    #[test]
    fn a_derived_key_is_adopted_for_its_own_token_only() {
        let token = "a launcher's token, long enough";
        let id = hex(&token_id(token)[..8]);
        let key = [7u8; 32];
        let text = format!("{id}:{}", hex(&key));
        assert!(!adopt_derived_key("another token, also long enough", &text));
        assert!(!adopt_derived_key(token, "zz:00"));
        assert!(!adopt_derived_key(token, "no colon"));
        assert!(!adopt_derived_key(token, &format!("{id}:abcd")));
        assert!(adopt_derived_key(token, &text));
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
        mac.update(b"meshwork subkey\0");
        mac.update(b"x");
        assert_eq!(
            subkey(token, "x"),
            <[u8; 32]>::from(mac.finalize().into_bytes())
        );
        assert_eq!(derived_key(token), text);
    }

    #[test]
    fn subkeys_differ_by_token_and_label_and_are_stable() {
        let t = "0123456789abcdef";
        let a = subkey(t, "link");
        assert_eq!(a, subkey(t, "link"));
        assert_ne!(a, subkey(t, "seed"));
        assert_ne!(a, subkey("0123456789abcdeF", "link"));
    }

    #[test]
    fn short_tokens_are_refused_by_name() {
        let e = check_token("s3cret").unwrap_err();
        assert_eq!(e, TokenError::TooShort { len: 6 });
        assert!(e.to_string().contains("CLUSTER_TOKEN"), "{e}");
        assert!(check_token("0123456789abcdef").is_ok());
        let r = random_token().unwrap();
        assert_eq!(r.len(), 64);
        assert!(check_token(&r).is_ok());
        assert_ne!(r, random_token().unwrap());
    }
}

//! Authentication: the token handshake every link and the seed begin
//! with (`handshake.rs`), sealing of what travels over TCP
//! (`seal.rs`, tagged by `frame_mac.rs`; `ENCRYPT_BULK`), and the cluster CA that QUIC's mutual TLS
//! trusts (`tls.rs`).

pub(crate) mod frame_mac;
pub(crate) mod handshake;
pub mod kdf;
pub(crate) mod seal;
pub mod tls;

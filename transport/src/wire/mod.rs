//! The wire format, as pure functions: the frame header (`frame.rs`), the
//! one resumable frame assembler every byte stream is read with
//! (`assembler.rs`), and the little-endian reader the handshake, seed and
//! discovery codecs share (`codec.rs`). Nothing here touches a socket, a
//! clock or a lock, so all of it is unit-tested and fuzzed directly.

pub(crate) mod assembler;
pub(crate) mod codec;
pub(crate) mod frame;

pub(crate) use assembler::Assembler;
pub(crate) use codec::Reader;
pub(crate) use frame::{FrameType, Header, HEADER_LEN};
